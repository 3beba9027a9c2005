-- Where the cursor comes to rest (in normal mode; on opening or entering a buffer), the server
-- is told (`draftline/cursor`): it prefills the window there in the background, so the first
-- suggestion at a new spot sees the whole window instead of a cold one. Editors send no cursor
-- with didOpen or didChange; while typing, the inline requests themselves say where it is.
local debounce = require('draftline.debounce')
local M = {}

---@type table<integer, integer>
local sent = {} -- bufnr -> the line last sent

local function send(bufnr, client_id)
  local client = vim.lsp.get_client_by_id(client_id)
  if not client or bufnr ~= vim.api.nvim_get_current_buf() or vim.api.nvim_get_mode().mode:match('^i') then
    return
  end
  local line = vim.api.nvim_win_get_cursor(0)[1] - 1
  if sent[bufnr] == line then
    return
  end
  sent[bufnr] = line
  client:notify('draftline/cursor', { textDocument = { uri = vim.uri_from_bufnr(bufnr) },
                                      position = { line = line, character = 0 } })
end

--- Watch `bufnr`: once the cursor has stayed on a new line for `delay_ms`, tell the server; on
--- entering the buffer, at once: someone who opens a file often types within a fraction of a
--- second, and the server's first window there needs that time.
function M.attach(bufnr, client_id, delay_ms)
  local now = function() send(bufnr, client_id) end
  local later = debounce.per_buffer(bufnr, delay_ms, now, function() sent[bufnr] = nil end)
  local group = vim.api.nvim_create_augroup('draftline_rest_' .. bufnr, { clear = true })
  vim.api.nvim_create_autocmd('CursorMoved', { group = group, buffer = bufnr, callback = later })
  vim.api.nvim_create_autocmd('BufEnter', { group = group, buffer = bufnr, callback = now })
  now() -- where the cursor is as the server attaches: a file just opened
end

return M
