"""pygls protocol that answers requests whose params fail to parse.

pygls logs such a message and drops it (pygls/io_.py runs `json.loads(body,
object_hook=protocol.structure_message)` and only logs the exception), so the client waits
forever. Here the request gets the JSON-RPC error (InvalidParams) before the exception goes
on to pygls's own logging."""
from __future__ import annotations

from typing import Any

from pygls.exceptions import JsonRpcException
from pygls.protocol import LanguageServerProtocol


class AnsweringProtocol(LanguageServerProtocol):
    def structure_message(self, data: dict[str, Any]):
        try:
            return super().structure_message(data)
        except JsonRpcException as exc:
            if "id" in data and "method" in data:  # a request: the client awaits an answer
                self._send_response(data["id"], error=exc.to_response_error())
            raise
