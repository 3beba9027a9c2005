"""The server's counters (lsp_server/serving/metrics.py) for what clients report."""
from lsp_server.serving.metrics import Metrics


def test_partial_accepts_count_apart_from_full_ones_and_sum_new_characters():
    m = Metrics()
    # acceptedLength is what is taken so far: a second word of the same suggestion adds 5, not 10.
    m.partially_accepted_at("file:///a.py", "print(x)  # done", 5)
    m.partially_accepted_at("file:///a.py", "print(x)  # done", 10)
    m.partially_accepted_at("file:///a.py", "other", 3)  # another suggestion counts from its start
    m.partially_accepted_at("file:///b.py", "print(x)  # done", 4)  # and so does another document
    stats = m.as_dict("ready")
    assert stats["partiallyAccepted"] == 4
    assert stats["acceptedChars"] == 10 + 3 + 4
    assert stats["accepted"] == 0
