-- Neovim 0.11 fallback: request textDocument/inlineCompletion after a pause in typing
-- (cancelling the previous request) and draw the suggestion as extmark ghost text.
local accept = require('draftline.accept')
local M = {}

local ns = vim.api.nvim_create_namespace('draftline.ghost')
vim.api.nvim_set_hl(0, 'DraftlineSuggestion', { link = 'Comment', default = true })

---@type table<integer, { client_id: integer, timer?: uv.uv_timer_t, request_id?: integer, suggestion?: table }>
local buffers = {}

local function hide(bufnr)
  vim.api.nvim_buf_clear_namespace(bufnr, ns, 0, -1)
end

local function cancel(bufnr)
  local b = buffers[bufnr]
  if b.timer then
    b.timer:stop()
    b.timer:close()
    b.timer = nil
  end
  local client = vim.lsp.get_client_by_id(b.client_id)
  if b.request_id and client then
    client:cancel_request(b.request_id)
  end
  b.request_id = nil
end

--- Draw what is left of the suggestion after the cursor; false when the typing left it behind.
local function draw(bufnr)
  hide(bufnr)
  local s = buffers[bufnr].suggestion
  local rest = s and accept.remaining(bufnr, s)
  if not rest or rest == '' then
    return false
  end
  local lines = vim.split(rest, '\n', { plain = true })
  local virt_lines = {}
  for i = 2, #lines do
    virt_lines[#virt_lines + 1] = { { lines[i], 'DraftlineSuggestion' } }
  end
  local row, col = unpack(vim.api.nvim_win_get_cursor(0))
  vim.api.nvim_buf_set_extmark(bufnr, ns, row - 1, col, {
    virt_text = { { lines[1], 'DraftlineSuggestion' } },
    virt_text_pos = 'inline',
    virt_lines = #virt_lines > 0 and virt_lines or nil,
    hl_mode = 'combine',
  })
  return true
end

local function to_suggestion(bufnr, client, item)
  local text = type(item.insertText) == 'string' and item.insertText or item.insertText.value
  local cursor = vim.api.nvim_win_get_cursor(0)
  local row, col = cursor[1] - 1, cursor[2]
  if item.range then
    row = item.range.start.line
    local line = vim.api.nvim_buf_get_lines(bufnr, row, row + 1, true)[1]
    col = vim.str_byteindex(line, client.offset_encoding, item.range.start.character, false)
  end
  return { text = text, row = row, col = col, client_id = client.id, command = item.command,
           uri = vim.uri_from_bufnr(bufnr) }
end

local function request(bufnr)
  local b = buffers[bufnr]
  local client = vim.lsp.get_client_by_id(b.client_id)
  if not client or vim.api.nvim_get_current_buf() ~= bufnr or not vim.api.nvim_get_mode().mode:match('^i') then
    return
  end
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  params.context = { triggerKind = 2 } -- Automatic
  local tick = vim.api.nvim_buf_get_changedtick(bufnr)
  local ok, id = client:request('textDocument/inlineCompletion', params, function(err, result)
    b.request_id = nil
    -- Typing moved on since the request: its answer belongs to another cursor.
    if err or not result or vim.api.nvim_buf_get_changedtick(bufnr) ~= tick then
      return
    end
    local item = (result.items or result)[1]
    if not item then
      return
    end
    b.suggestion = to_suggestion(bufnr, client, item)
    if draw(bufnr) then
      client:request('workspace/executeCommand', { command = 'draftline.didShowCompletion',
        arguments = { { uri = b.suggestion.uri, text = b.suggestion.text } } }, function() end)
    end
  end, bufnr)
  b.request_id = ok and id or nil
end

local function on_change(bufnr, debounce_ms)
  cancel(bufnr)
  -- Typing through the suggestion keeps it; anything else throws it away and asks again.
  if draw(bufnr) then
    return
  end
  buffers[bufnr].suggestion = nil
  buffers[bufnr].timer = vim.defer_fn(function()
    buffers[bufnr].timer = nil
    request(bufnr)
  end, debounce_ms)
end

--- Ask again at the cursor (the server has a suggestion ready there).
function M.ask_again(bufnr)
  if buffers[bufnr] then
    request(bufnr)
  end
end

function M.dismiss()
  local bufnr = vim.api.nvim_get_current_buf()
  local b = buffers[bufnr]
  if not (b and b.suggestion) then
    return false
  end
  cancel(bufnr)
  b.suggestion = nil
  hide(bufnr)
  return true
end

function M.attach(bufnr, client_id, debounce_ms)
  if buffers[bufnr] then
    return
  end
  buffers[bufnr] = { client_id = client_id }
  local group = vim.api.nvim_create_augroup('draftline.ghost.' .. bufnr, { clear = true })
  vim.api.nvim_create_autocmd({ 'InsertEnter', 'TextChangedI', 'CursorMovedI' }, {
    group = group, buffer = bufnr,
    callback = function() on_change(bufnr, debounce_ms) end,
  })
  vim.api.nvim_create_autocmd({ 'InsertLeave', 'BufLeave' }, {
    group = group, buffer = bufnr, callback = M.dismiss,
  })
  vim.api.nvim_create_autocmd('BufWipeout', {
    group = group, buffer = bufnr,
    callback = function()
      cancel(bufnr)
      buffers[bufnr] = nil
    end,
  })
end

--- Accept the visible suggestion; false when there is none. Safe in an <expr> mapping:
--- the edit runs after the mapping returns.
---@param how 'all'|'word'|'line'
function M.accept(how)
  local bufnr = vim.api.nvim_get_current_buf()
  local b = buffers[bufnr]
  local s = b and b.suggestion
  local rest = s and accept.remaining(bufnr, s)
  if not rest or rest == '' then
    return false
  end
  vim.schedule(function()
    hide(bufnr)
    if how == 'all' then
      b.suggestion = nil
    end
    accept.apply(bufnr, s, how)
  end)
  return true
end

return M
