import torch

# As the pipeline does (see rlvr.pipeline.configure_cpu_math): denormal floats make CPU training
# math up to ~100x slower and change nothing that matters.
torch.set_flush_denormal(True)
