"""Deploy runtime (numpy + onnxruntime, never torch): artifact schema, observations, safety, inference."""
