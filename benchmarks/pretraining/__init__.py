"""Pretraining: learning curves of a run on the validation tissues, and the stopping rule."""
