"""Stage 1, read: the model directory as files — config, index, strict safetensors headers; never the weights."""
