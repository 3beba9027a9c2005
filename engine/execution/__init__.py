"""Running a model's passes: the backends (a model and its KV cache), the C decoder (native/),
torch's kernels, rotary tables, and the execution plan calibration fills for this machine."""
