"""The GPU suite: every GPU figure and a time-boxed pretraining run in one command, its staging and its evaluation."""
