"""Test-wide settings: never touch the Hugging Face hub; keep transformers quiet; verify every
graph a frontend or a pass produces (``NARROWPIPE_VERIFY``)."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ["NARROWPIPE_VERIFY"] = "1"
