"""Stages around RL that reuse its pieces: cold-start SFT and held-out evaluation."""
