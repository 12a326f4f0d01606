"""The model examples of issue #35 train with built-in ops only: the GCN on the karate
club, the top-2 mixture of experts and word2vec with negative sampling (small sizes,
a few seconds each)."""
from __future__ import annotations

import re

from test_examples import printed_values, run_example


def _numbers(out: str, label: str) -> list[float]:
    return [float(v) for v in re.findall(rf"{label} ([0-9.]+)", out)]


def test_gcn_learns_the_clubs_from_four_labels():
    out = run_example("gcn_karate.py", "--steps", "120")
    losses = _numbers(out, "loss")
    assert losses[-1] < losses[0] / 10
    accuracy = float(re.search(r"accuracy on all 34 members: ([0-9.]+)", out).group(1))
    assert accuracy >= 0.9  # Kipf & Welling's GCN gets 33 or 34 of 34 here


def test_moe_learns_its_teacher_and_every_expert_takes_tokens():
    out = run_example("moe.py", "--tokens", "256", "--steps", "120")
    losses = _numbers(out, "loss")
    assert losses[-1] < losses[0] / 3
    load = printed_values(out)["tokens per expert, last step"]
    assert sum(load) == 2 * 256 and min(load) > 0  # two experts per token, none starved


def test_word2vec_puts_words_of_one_topic_together():
    out = run_example("word2vec.py", "--vocab", "500", "--steps", "150", "--batch", "256")
    losses = _numbers(out, "loss")
    assert losses[-1] < losses[0] / 2
    share = float(re.search(r"same topic: ([0-9.]+)", out).group(1))
    assert share > 0.5  # chance is 0.1
