-- What the headless Neovim tests share: waiting inside a coroutine while Neovim's loop runs,
-- typing, reading the ghost text, and asking the server directly (the independent route).
local M = {}

function M.log(...)
  io.stderr:write(table.concat(vim.tbl_map(tostring, { ... }), ' ') .. '\n')
end

function M.fail(msg)
  M.log('FAIL: ' .. msg)
  vim.cmd('cquit 1')
end

local co

--- Let the main loop run (typeahead, timers, LSP messages) until `pred` holds.
function M.wait_until(what, pred, timeout_ms)
  local deadline = vim.uv.now() + (timeout_ms or 60000)
  while not pred() do
    if vim.uv.now() > deadline then
      M.fail('timed out waiting for ' .. what)
    end
    vim.defer_fn(function() assert(coroutine.resume(co)) end, 50)
    coroutine.yield()
  end
end

function M.feed(keys)
  vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes(keys, true, false, true), 'm', false)
end

--- Ghost text drawn on the buffer, from any namespace: inline text plus virtual lines.
function M.ghost_text(bufnr)
  local parts = {}
  for _, m in ipairs(vim.api.nvim_buf_get_extmarks(bufnr, -1, 0, -1, { details = true })) do
    local d = m[4]
    local line = {}
    for _, chunk in ipairs(d.virt_text or {}) do
      line[#line + 1] = chunk[1]
    end
    parts[#parts + 1] = table.concat(line)
    for _, vl in ipairs(d.virt_lines or {}) do
      local l = {}
      for _, chunk in ipairs(vl) do
        l[#l + 1] = chunk[1]
      end
      parts[#parts + 1] = table.concat(l)
    end
  end
  return table.concat(parts, '\n')
end

--- The server's own answer at the cursor, asked directly (the independent route).
function M.server_suggestion(bufnr)
  local client = vim.lsp.get_clients({ name = 'draftline', bufnr = bufnr })[1]
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  params.context = { triggerKind = 1 }
  local resp = client:request_sync('textDocument/inlineCompletion', params, 30000, bufnr)
  local items = resp and resp.result and (resp.result.items or resp.result) or {}
  if not items[1] then
    return nil
  end
  local item = items[1]
  local text = type(item.insertText) == 'string' and item.insertText or item.insertText.value
  -- The part already typed between the item's range start and the cursor is not new.
  local row, col = unpack(vim.api.nvim_win_get_cursor(0))
  local line = vim.api.nvim_buf_get_lines(bufnr, row - 1, row, true)[1]
  local start = vim.str_byteindex(line, client.offset_encoding, item.range.start.character, false)
  return text:sub(col - start + 1)
end

function M.stats(bufnr)
  local client = vim.lsp.get_clients({ name = 'draftline', bufnr = bufnr })[1]
  local resp = client:request_sync('workspace/executeCommand', { command = 'draftline.stats', arguments = {} }, 10000, bufnr)
  return resp.result
end

function M.buffer_text(bufnr)
  return table.concat(vim.api.nvim_buf_get_lines(bufnr, 0, -1, true), '\n')
end

function M.check(cond, msg)
  if not cond then
    M.fail(msg)
  end
end

--- Run `fn` in the coroutine that wait_until yields from; fail after `timeout_ms`.
function M.run(fn, timeout_ms)
  vim.defer_fn(function() M.fail('the whole test timed out') end, timeout_ms)
  co = coroutine.create(function()
    local ok, err = xpcall(fn, debug.traceback)
    if not ok then
      M.fail(err)
    end
  end)
  assert(coroutine.resume(co))
end

--- The plugin from this checkout, set up on the small model's server with `settings`.
function M.start_plugin(repo, settings)
  vim.opt.runtimepath:prepend(repo .. '/editors/nvim')
  vim.opt.swapfile = false
  vim.cmd('filetype on')
  local draftline = require('draftline')
  draftline.setup({
    cmd = { repo .. '/.venv/bin/lsp_server', '--stdio', '--model', 'smollm2-135m' },
    filetypes = { 'python' },
    force_fallback = os.getenv('DRAFTLINE_FALLBACK') == '1',
    settings = settings,
  })
  return draftline
end

return M
