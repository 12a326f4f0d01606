"""word2vec: skip-gram with negative sampling, on a synthetic corpus with topics.

Two tables of embeddings (the words as centres and as contexts). A step looks up
the centre and context rows of a batch of pairs (sparse reads), draws negative
contexts with graphflow's own random op (RandomUniformInt, a fresh draw every step),
and scores each pair by a dot product; the loss is the logistic loss of true pairs
against negatives (sigmoid cross-entropy). The gradients are IndexedSlices: Adam's
sparse update (TF 1.x's) touches the looked-up rows of each table. The corpus is
sentences of words drawn from one topic each, so words of one topic end up close; it
prints the loss as it falls and how often a word's nearest neighbour shares its topic.

    python examples/word2vec.py [--vocab 2000] [--dim 32] [--steps 400] [--logdir logs]
"""
import argparse

import numpy as np

import graphflow as gf
from _show import show


def corpus(rng, vocab: int, topics: int, sentences: int, length: int):
    """Sentences of ``length`` words, each drawn from one topic's share of the vocabulary
    (Zipf-like within it); the topic of every word."""
    topic_of = np.arange(vocab) % topics
    members = [np.flatnonzero(topic_of == t) for t in range(topics)]
    weights = [1 / np.arange(1, len(m) + 1) for m in members]
    weights = [w / w.sum() for w in weights]
    chosen = rng.integers(0, topics, sentences)
    text = np.stack([rng.choice(members[t], size=length, p=weights[t]) for t in chosen])
    return text, topic_of


def pairs(text: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Every (centre, context) pair within ``window`` words of each other."""
    centres, contexts = [], []
    for shift in range(1, window + 1):
        centres += [text[:, :-shift].ravel(), text[:, shift:].ravel()]
        contexts += [text[:, shift:].ravel(), text[:, :-shift].ravel()]
    return np.concatenate(centres).astype(np.int32), np.concatenate(contexts).astype(np.int32)


def build(s: gf.Scope, vocab: int, dim: int, negatives: int, seed: int):
    rng = np.random.default_rng(seed)
    centre_table = s.variable(rng.uniform(-0.5 / dim, 0.5 / dim, (vocab, dim)).astype(np.float32),
                              name="centre")
    context_table = s.variable(np.zeros((vocab, dim), np.float32), name="context")
    centre = s.placeholder(gf.int32, shape=[None], name="centre_ids")
    context = s.placeholder(gf.int32, shape=[None], name="context_ids")
    batch = s.shape(centre)[0]
    noise = s.random_uniform(s.pack([batch, negatives]), 0, vocab, dtype=gf.int32, seed=7)
    u = centre_table.sparse_read(centre)                                 # [B, D]
    v = context_table.sparse_read(context)                               # [B, D]
    n = context_table.sparse_read(s.reshape(noise, [-1]))                # [B * K, D]
    positive = s.reduce_sum(s.mul(u, v), 1)                              # [B]
    u_rows = s.reshape(s.tile(s.expand_dims(u, 1), [1, negatives, 1]), [-1, dim])
    negative = s.reduce_sum(s.mul(u_rows, n), 1)                         # [B * K]
    logits = s.concat([positive, negative], 0)
    labels = s.concat([s.ones_like(positive), s.zeros_like(negative)], 0)
    loss = s.reduce_sum(s.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))
    loss = s.real_div(loss, s.cast(batch, gf.float32), name="loss")
    train = gf.train.AdamOptimizer(0.01).minimize(loss)
    return centre, context, loss, train, centre_table


def neighbours_share_topic(table: np.ndarray, topic_of: np.ndarray, words: int) -> float:
    """The share of the ``words`` most frequent-ish words whose nearest neighbour (cosine)
    has their topic."""
    unit = table / np.maximum(np.linalg.norm(table, axis=1, keepdims=True), 1e-9)
    sample = np.arange(words)
    similarity = unit[sample] @ unit.T
    similarity[sample, sample] = -np.inf
    return float(np.mean(topic_of[np.argmax(similarity, axis=1)] == topic_of[sample]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vocab", type=int, default=2000)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--topics", type=int, default=10)
    parser.add_argument("--negatives", type=int, default=5)
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--logdir", default=None, help="TensorBoard events: the loss")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    text, topic_of = corpus(rng, args.vocab, args.topics, sentences=2000, length=12)
    centres, contexts = pairs(text, window=2)
    g = gf.Graph()
    s = gf.Scope(g)
    centre, context, loss, train, table = build(s, args.vocab, args.dim, args.negatives, seed=0)
    writer = gf.summary.FileWriter(args.logdir, graph=g) if args.logdir else None
    with gf.Session(g) as sess:
        sess.run(gf.global_variables_initializer(g))
        step = sess.make_callable([loss, train], [centre, context])
        every = max(1, args.steps // 5)
        for k in range(1, args.steps + 1):
            pick = rng.integers(0, len(centres), args.batch)
            value, _ = step(centres[pick], contexts[pick])
            if writer is not None:
                writer.add_scalar("loss", float(value), k)
            if k % every == 0 or k == 1:
                print(f"step {k:>{len(str(args.steps))}}/{args.steps}  loss {value:.4f}")
        share = neighbours_share_topic(sess.run(table), topic_of, min(200, args.vocab))
    show("loss, last step", round(float(value), 4))
    print(f"nearest neighbour in the same topic: {share:.2f} (chance: {1 / args.topics:.2f})")
    if writer is not None:
        writer.close()


if __name__ == "__main__":
    main()
