"""onnxruntime-training's ``onnxruntime.capi.training``: ``training_session``."""
