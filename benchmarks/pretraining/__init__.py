"""Pretraining experiments: objective controls, learning curves, levers, the real-corpus acceptance run."""
