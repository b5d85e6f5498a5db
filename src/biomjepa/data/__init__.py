"""Data layer: vocabulary, identifier tables, AnnData/shard readers, tokenizer and collator.

Submodules are imported explicitly (``from biomjepa.data.vocab import Vocab``); importing this
package loads nothing heavy.
"""
