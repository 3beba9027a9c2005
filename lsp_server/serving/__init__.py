"""Serving: the stdio LSP server, its one model thread (scheduler), the document store and
workspace index, protocol and metrics. It may import completion and next_edit."""
