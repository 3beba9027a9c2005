"""Inline completion: from a cursor to cleaned ghost text (plan, prompt, cold window, repository
context, clean-up, the typed-through cache). Imports engine/ and lsp_server.options, never serving."""
