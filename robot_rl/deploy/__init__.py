"""Deploy runtime (numpy + onnxruntime, never torch): artifact schema, observations, safety, inference, and the
ROS demo helpers (`ros_frames`, `ros_replay`, `policies`)."""
