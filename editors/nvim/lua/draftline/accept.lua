-- Accepting a suggestion, all of it or its next word / line, and telling the server.
-- A suggestion here is { text, row, col, client_id, uri, command? }: `text` replaces the buffer
-- from (row, col) (0-based, byte column) to the cursor, so it may repeat what was typed.
local M = {}

--- The part of the suggestion after the cursor; nil when the typed text no longer matches it.
---@return string?
function M.remaining(bufnr, s)
  local cursor = vim.api.nvim_win_get_cursor(0)
  local row, col = cursor[1] - 1, cursor[2]
  if row ~= s.row or col < s.col then
    return nil
  end
  local typed = vim.api.nvim_buf_get_text(bufnr, row, s.col, row, col, {})[1]
  if s.text:sub(1, #typed) ~= typed then
    return nil
  end
  return s.text:sub(#typed + 1)
end

--- The next word (with the spaces before it) or the rest of the line; at a line end, the
--- line break and the next line's indentation and word / line.
function M.next_chunk(rest, how)
  local lead, body = rest:match('^(\n[ \t]*)(.*)$')
  lead, body = lead or '', lead and body or rest
  local chunk
  if how == 'line' then
    chunk = body:match('^[^\n]*')
  else
    chunk = body:match('^[ \t]*[%w_]+') or body:match('^[ \t]*[^%w_%s]+') or body:match('^[ \t]*')
  end
  return lead .. chunk
end

local function notify(client_id, command, args)
  local client = vim.lsp.get_client_by_id(client_id)
  if client then
    client:request('workspace/executeCommand', { command = command, arguments = { args } }, function() end)
  end
end

--- Insert `s` (how = 'all' | 'word' | 'line') at the cursor and report it to the server.
---@return boolean whether anything was inserted
function M.apply(bufnr, s, how)
  local rest = M.remaining(bufnr, s)
  if not rest or rest == '' then
    return false
  end
  local chunk = how == 'all' and rest or M.next_chunk(rest, how)
  local row, col = unpack(vim.api.nvim_win_get_cursor(0))
  local lines = vim.split(chunk, '\n', { plain = true })
  vim.api.nvim_buf_set_text(bufnr, row - 1, col, row - 1, col, lines)
  local last = #lines == 1 and col + #lines[1] or #lines[#lines]
  vim.api.nvim_win_set_cursor(0, { row + #lines - 1, last })
  -- The server's report {uri, text}: `text` is the suggestion proper, the end of `s.text`.
  local cmd = s.command or { command = 'draftline.didAccept', arguments = { { uri = s.uri, text = s.text } } }
  local report = cmd.arguments[1]
  if how == 'all' or chunk == rest then
    notify(s.client_id, cmd.command, report)
  else
    -- acceptedLength: the UTF-16 length of the suggestion's start that is now in the buffer.
    local taken = report.text:sub(1, math.max(0, #report.text - #rest + #chunk))
    notify(s.client_id, 'draftline.didPartiallyAcceptCompletion',
      { uri = report.uri, text = report.text, acceptedLength = vim.str_utfindex(taken, 'utf-16') })
  end
  return true
end

return M
