"""The tuner's parts; cleanrl_utils/tuner.py is its command line and import path."""
