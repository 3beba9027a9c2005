"""Next edits: the edit history, where the next edit is due, and its rewrite. Imports engine/,
lsp_server.options and completion's prompt helpers, never serving."""
