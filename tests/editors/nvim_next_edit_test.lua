-- Headless Neovim test of next-edit suggestions against the real server: rename a function's
-- parameters, pause, see the preview of the server's next edit, dismiss it with Esc, see it
-- again after another change, and make it with Tab. Writes the text before Tab, the server's
-- own answer (asked directly) and the text after Tab to $DRAFTLINE_RESULT (JSON) for
-- tests/test_editor_nvim_next_edit.py to check. Exit code 0 = pass; failures go to stderr.
-- Run: DRAFTLINE_RESULT=/tmp/r.json nvim --headless -u tests/editors/minimal_init.lua -c 'luafile tests/editors/nvim_next_edit_test.lua'
local draftline = require('draftline')
local TIMEOUT_MS = 150000

local h = dofile(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)) .. '/helpers.lua')
local log, wait_until, feed, check, buffer_text = h.log, h.wait_until, h.feed, h.check, h.buffer_text
local ns = vim.api.nvim_create_namespace('draftline_next_edit')

local function preview(bufnr)
  return #vim.api.nvim_buf_get_extmarks(bufnr, ns, 0, -1, {}) > 0
end

local function run()
  local dir = vim.fn.tempname()
  vim.fn.mkdir(dir, 'p')
  -- On disk first: the server's edit history starts from the opened text.
  vim.fn.writefile({
    'def area(width, height):',
    '    return width * height',
    '',
    '',
    'def perimeter(width, height):',
    '    return 2 * (width + height)',
  }, dir .. '/shapes.py')
  vim.cmd.edit(dir .. '/shapes.py')
  local bufnr = vim.api.nvim_get_current_buf()
  wait_until('the server to attach', function() return #vim.lsp.get_clients({ name = 'draftline', bufnr = bufnr }) > 0 end)
  wait_until('the model to load', function() return (draftline.status() or {}).state == 'ready' end, TIMEOUT_MS)

  -- Two edits, one per line, as a user renames the parameters of the first function.
  vim.api.nvim_buf_set_text(bufnr, 0, 9, 0, 22, { 'w, h' })
  vim.api.nvim_buf_set_text(bufnr, 1, 11, 1, 25, { 'w * h' })
  vim.api.nvim_win_set_cursor(0, { 2, 4 })
  wait_until('the preview', function() return preview(bufnr) end, 90000)
  feed('<Esc>')
  wait_until('Esc to dismiss it', function() return not preview(bufnr) end)

  feed('A <BS><Esc>') -- another change (the text stays): after the pause the preview comes back
  wait_until('the preview again', function() return preview(bufnr) end, 90000)
  local client = vim.lsp.get_clients({ name = 'draftline', bufnr = bufnr })[1]
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  params.version = vim.lsp.util.buf_versions[bufnr]
  local resp = client:request_sync('draftline/nextEdit', params, 90000, bufnr)
  check(resp and resp.result, 'the server answers the same version directly')
  local before = buffer_text(bufnr)
  feed('<Tab>')
  wait_until('Tab to make the edit', function() return buffer_text(bufnr) ~= before end)
  check(not preview(bufnr), 'no preview after the edit is made')

  local out = assert(io.open(assert(os.getenv('DRAFTLINE_RESULT')), 'w'))
  out:write(vim.json.encode({ before = before, edit = resp.result, after = buffer_text(bufnr) }))
  out:close()
  log('PASS ' .. (vim.version().minor >= 12 and '0.12' or '0.11'))
  vim.cmd('qall!')
end

h.run(run, TIMEOUT_MS + 120000)
