"""`python -m engine.execution.native`: compile the native decoder for this machine now, if it is not
kept yet. Installing runs it (the Makefile), as installing llama.cpp compiles it, so that no
start pays the compile (~6 s on two cores). Where the decoder cannot run here it logs why and
exits 0: the torch kernels serve instead."""
import logging
import sys

from engine.execution.native import load_library

logging.basicConfig(level=logging.INFO, format="draftline: %(message)s", stream=sys.stderr)
load_library()
