"""Special tokens known by name, as llama.cpp knows them (src/llama-vocab.cpp), for vocabularies
whose metadata does not give their ids. llama.cpp also makes such tokens control tokens, so their
text in a user's file stays text (DeepSeek-Coder's GGUFs mark "<｜fim▁begin｜>" user-defined)."""
from __future__ import annotations

# GGUF `tokenizer.ggml.<key>_token_id` -> the names llama.cpp looks for when the key is absent.
BY_KEY: dict[str, tuple[str, ...]] = {
    "eot": ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>", "_<EOT>",
            "<｜end▁of▁sentence｜>", "<end_of_utterance>"),
    "eom": ("<|eom_id|>",),
    "fim_pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
                "<|code_prefix|>"),
    "fim_suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
                "<|code_suffix|>"),
    "fim_mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
                "<|code_middle|>"),
    "fim_pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>"),
    "fim_rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "fim_sep": ("<|file_sep|>",),
}

# Special tokens that end a generation: llama.cpp's end-of-generation names, and Qwen2.5-Coder's
# FIM pad and file separator. Only special (control) tokens count: Qwen's "</s>" is ordinary text.
END_OF_GENERATION = frozenset({
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>", "<|endoftext|>",
    "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>", "<|file_sep|>", "<|fim_pad|>"})
