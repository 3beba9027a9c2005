"""The suffix automaton against brute force: longest matches and continuation counts over live
strings, after adding, removing and re-adding strings."""
import random

from engine.drafters.suffix_automaton import ROOT, SuffixAutomaton


def occurrences(strings: list[list[int]], pattern: list[int]) -> list[tuple[int, int]]:
    """(string, end) of every occurrence of `pattern`."""
    n = len(pattern)
    return [(i, end) for i, s in enumerate(strings) for end in range(n, len(s) + 1) if s[end - n:end] == pattern]


def longest_suffix_match(strings: list[list[int]], text: list[int]) -> int:
    for n in range(len(text), 0, -1):
        if occurrences(strings, text[-n:]):
            return n
    return 0


def continuations(strings: list[list[int]], pattern: list[int]) -> dict[int, int]:
    found: dict[int, int] = {}
    for i, end in occurrences(strings, pattern):
        if end < len(strings[i]):
            found[strings[i][end]] = found.get(strings[i][end], 0) + 1
    return found


def check(sam: SuffixAutomaton, live: list[list[int]], rng: random.Random) -> None:
    for _ in range(30):
        text = [rng.randrange(4) for _ in range(rng.randrange(1, 12))]
        state, matched = sam.match(text)
        assert matched == longest_suffix_match(live, text)
        suffix = text[len(text) - matched:]
        if matched:
            assert sam.count[state] == len(occurrences(live, suffix))
            children = {t: sam.count[s] for t, s in sam.children(state)}
            assert children == continuations(live, suffix)


def test_matches_and_counts_equal_brute_force_through_adds_and_removes():
    rng = random.Random(0)
    sam = SuffixAutomaton()
    live: list[list[int]] = []
    for _ in range(60):
        if live and rng.random() < 0.35:
            gone = live.pop(rng.randrange(len(live)))
            sam.remove(gone)
        else:
            s = [rng.randrange(4) for _ in range(rng.randrange(1, 25))]
            if live and rng.random() < 0.3:  # an edited copy of a live string
                s = live[rng.randrange(len(live))][:rng.randrange(1, 10)] + s
            sam.add(s)
            live.append(s)
        check(sam, live, rng)


def test_a_string_can_grow_and_shrink_at_its_end():
    """The context follows the target's cache: tokens appended, then the rejected ones taken
    back, by retracting the prefixes' states in reverse."""
    rng = random.Random(1)
    sam = SuffixAutomaton()
    other = [rng.randrange(3) for _ in range(30)]
    sam.add(other)
    text: list[int] = []
    prefixes = [ROOT]
    for _ in range(200):
        if text and rng.random() < 0.4:
            for _ in range(rng.randrange(1, min(5, len(text)) + 1)):
                text.pop()
                sam.retract(prefixes.pop())
        else:
            token = rng.randrange(3)
            prefixes.append(sam.extend(prefixes[-1], token))
            text.append(token)
        check(sam, [other, text], rng)


def test_dead_text_no_longer_matches():
    sam = SuffixAutomaton()
    sam.add([1, 2, 3, 4])
    assert sam.match([9, 1, 2])[1] == 2
    sam.remove([1, 2, 3, 4])
    assert sam.match([9, 1, 2]) == (ROOT, 0)
    assert sam.children(ROOT) == []
    states = sam.states
    sam.add([1, 2, 3, 5])  # mostly seen before: the states are reused
    assert sam.match([1, 2, 3])[1] == 3
    assert sam.states <= states + 2
