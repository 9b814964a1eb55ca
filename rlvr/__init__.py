"""rlvr: reinforcement learning of language models on verifiable rewards.

The data flow of one RL step, one module each:
    rollout/ -> verifiers/ -> algorithms/advantage.py -> algorithms/loss.py -> update.py
and loop.py calls them in that order; stages/ holds SFT and evaluation, pipeline.py the recipe.
"""

__version__ = "0.1.0"
