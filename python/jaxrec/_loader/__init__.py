"""The Loader and its stages: host shards, record order, shuffling, batches, device transfer."""
