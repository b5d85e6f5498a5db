"""Model evaluation (model card, baselines, biology) and checkpoint selection on the validation cells."""
