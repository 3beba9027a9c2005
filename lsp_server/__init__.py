"""Draftline's language server and command line: LSP glue around `engine`."""
