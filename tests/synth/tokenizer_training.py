"""How the demo's shipped ``tokenizer.json`` was made: byte-level BPE trained offline on an
embedded corpus (a few milliseconds, byte-identical on every run with the pinned ``tokenizers``).
``tests/test_demo.py`` retrains it and compares with the file mxtrim ships."""

from __future__ import annotations

import json

from mxtrim_tui.demo.tokenizer import BOS, SPECIAL_TOKENS

# A few paragraphs of plain English; enough distinct pairs for a few hundred merges.
CORPUS = """\
The quick brown fox jumps over the lazy dog. A small model is still a model: it has an
embedding table, a stack of decoder layers, a final norm and a head that turns hidden states
into scores over the vocabulary. Large language models are trained on a great deal of text,
and their checkpoints are split into many shards of a few gigabytes each.
When you want to test a serving stack, you rarely need every layer. Trimming a checkpoint to
its first few layers keeps the tensor names, the data types and the quantization scales, so the
loader walks the same code paths while the files stay small enough to copy in seconds.
Every tensor has a name, a dtype and a shape. Attention layers project queries, keys and
values; mixture of experts layers route each token to a few experts chosen by a gate. Some
models predict more than one token at a time with an extra block at the end of the stack.
She sells sea shells by the sea shore. The shells she sells are surely sea shells.
How much wood would a woodchuck chuck if a woodchuck could chuck wood?
Peter Piper picked a peck of pickled peppers. Where is the peck of pickled peppers?
It was the best of times, it was the worst of times, it was the age of wisdom, it was the age
of foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season
of light, it was the season of darkness, it was the spring of hope, it was the winter of despair.
Please write a short answer. What is the capital of France? The capital of France is Paris.
What is two plus two? Two plus two is four. Count from one to ten: one, two, three, four,
five, six, seven, eight, nine, ten. Numbers: 0 1 2 3 4 5 6 7 8 9 10 16 32 64 128 256 512 1024.
The user asks a question and the assistant answers it. The system message sets the rules.
Hello! How are you today? I am fine, thank you. Good morning, good evening and good night.
Weights, biases, scales and norms are stored in little-endian order after a JSON header.
Configuration files describe the hidden size, the number of heads, the rope theta and more.
def main():\n    print("hello world")\n    return 0\n
if __name__ == "__main__":\n    main()\n
"""



def build_tokenizer_json(vocab_size: int = 512) -> str:
    """Train the byte-level BPE and return ``tokenizer.json`` text (deterministic)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=1,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # One line per "sequence"; training is single-threaded on a corpus this small and
    # merges are ordered by (count, pair), so the output does not depend on the run.
    tok.train_from_iterator(CORPUS.splitlines(), trainer=trainer)
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single=f"{BOS}:0 $A:0",
                pair=f"{BOS}:0 $A:0 {BOS}:1 $B:1",
                special_tokens=[(BOS, bos_id)],
            ),
        ]
    )
    return json.dumps(json.loads(tok.to_str()), indent=2, ensure_ascii=False) + "\n"
