"""Write the engine's byte tokenizer as a Hugging Face tokenizer directory, for clients that count
tokens or apply a chat template themselves (``python -m sglang.benchmark.serving --tokenizer DIR``,
``AutoTokenizer.from_pretrained(DIR)``), offline:

    python -m pytest_specdec.engine.export_tokenizer DIR

The directory holds ``tokenizer.json`` (a byte-level BPE without merges: one token per UTF-8
byte, ids 0-255 as the engine's, the special tokens after them, BOS prepended as the engine
does), ``tokenizer_config.json`` (with the chat template /v1/chat/completions renders) and
``special_tokens_map.json``. Encoding a text with it gives exactly the engine's token ids.

The engine itself writes one at startup (`export_cached`) and reports its path as
``tokenizer_path``, so ``python -m sglang.benchmark.serving`` without ``--tokenizer`` loads it as it
loads the local directory an SGLang server reports, rather than asking the Hub for the served name.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

from ..whole_file import replace_text
from .openai_api import CHAT_TEMPLATE
from .tokenizer import BOS_ID, EOS_ID, PAD_ID, SPECIAL_TOKENS


def byte_alphabet() -> dict[int, str]:
    """GPT-2's byte-to-printable-character map, the alphabet of Hugging Face's ByteLevel pieces."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def tokenizer_json() -> dict:
    bos = SPECIAL_TOKENS[BOS_ID]
    added = [{"id": i, "content": text, "single_word": False, "lstrip": False, "rstrip": False,
              "normalized": False, "special": True} for i, text in sorted(SPECIAL_TOKENS.items())]
    with_bos = [{"SpecialToken": {"id": bos, "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        "post_processor": {"type": "TemplateProcessing", "single": with_bos,
                           "pair": [*with_bos, {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {bos: {"id": bos, "ids": [BOS_ID], "tokens": [bos]}}},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": {char: b for b, char in byte_alphabet().items()}, "merges": []},
    }


def tokenizer_config(context_length: int) -> dict:
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": SPECIAL_TOKENS[BOS_ID],
        "eos_token": SPECIAL_TOKENS[EOS_ID],
        "pad_token": SPECIAL_TOKENS[PAD_ID],
        "model_max_length": context_length,
        "clean_up_tokenization_spaces": False,
        "split_special_tokens": True,  # the engine reads "<s>" in a text as three bytes, never as BOS
        "chat_template": CHAT_TEMPLATE,
    }


def tokenizer_files(context_length: int) -> dict[str, str]:
    """Each file of the tokenizer directory by name, as the text written into it."""
    special = {"bos_token": SPECIAL_TOKENS[BOS_ID], "eos_token": SPECIAL_TOKENS[EOS_ID],
               "pad_token": SPECIAL_TOKENS[PAD_ID]}
    return {name: json.dumps(content, indent=1, ensure_ascii=False) + "\n"
            for name, content in (("tokenizer.json", tokenizer_json()),
                                  ("tokenizer_config.json", tokenizer_config(context_length)),
                                  ("special_tokens_map.json", special))}


def export(directory: Path, *, context_length: int = 4096) -> Path:
    """Write the tokenizer files into ``directory`` (created if needed) and return it."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in tokenizer_files(context_length).items():
        (directory / name).write_text(text, encoding="utf-8")
    return directory


def cache_root() -> Path:
    """Where the engine keeps the tokenizers it exports: the user's cache directory (XDG), not the
    temporary directory, which a run must leave as it found it."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"  # XDG: a relative path is ignored
    return base / "pytest-specdec" / "tokenizers"


def export_cached(*, context_length: int, root: Path | None = None) -> Path:
    """The engine's tokenizer directory under ``root`` (default `cache_root()`), written if missing.

    The directory is named by a digest of its contents, so engines of any version or context
    length share one only where it is identical, nothing needs removing when an engine stops (or
    is killed), and what accumulates is one small directory per tokenizer ever served. Each file is
    replaced atomically, so a reader, or an engine starting at the same time, never sees one half
    written.
    """
    files = tokenizer_files(context_length)
    digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]
    directory = (cache_root() if root is None else root) / digest
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        path = directory / name
        if not (path.is_file() and path.read_text(encoding="utf-8") == text):
            replace_text(path, text, durable=True)
    return directory


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_specdec.engine.export_tokenizer",
                                     description="Write the embedded engine's tokenizer as a Hugging Face "
                                                 "tokenizer directory.")
    parser.add_argument("directory", type=Path)
    parser.add_argument("--context-length", type=int, default=4096,
                        help="the engine's --context-length, recorded as model_max_length")
    args = parser.parse_args(argv)
    if args.context_length < 1:
        parser.error(f"--context-length must be >= 1, got {args.context_length}")
    if args.directory.exists() and not args.directory.is_dir():
        parser.error(f"cannot write the tokenizer into {args.directory}: it is a file; name a directory")
    try:
        print(export(args.directory, context_length=args.context_length))
    except OSError as exc:  # permissions, a read-only or full file system
        parser.exit(1, f"{parser.prog}: error: cannot write the tokenizer into {args.directory}: "
                       f"{exc.strerror or exc}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
