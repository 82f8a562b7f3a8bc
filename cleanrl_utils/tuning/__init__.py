"""The tuner's parts (cleanrl_utils/tuner.py is its command line and its import path): the trials, their runs, the
study's storage, the scores."""
