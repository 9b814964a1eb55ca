"""The commands around RL that compose its stages: eval, rft, distill and recipes.

`rlvr lab` and `rlvr train` run the recipe in `rlvr/pipeline.py`; each module here is what one
more command does, in terms of the same stages (evaluation, SFT, RL) and the same run directories.
"""
