"""The models the tests name: the small one most tests run on (fast, 98 MB, installed by the
set-up), and the real code models of the real-model tier (fetched once per machine into the
checkout's .cache: engine/loading/fetch.py)."""

SMALL = "smollm2-135m"
REAL = "qwen2.5-coder-1.5b"
REAL_DRAFT = "qwen2.5-coder-0.5b"
