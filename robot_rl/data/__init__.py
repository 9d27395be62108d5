"""Data on the learning side: replay buffers, rollout storage, demonstrations and datasets."""
