-- Headless Neovim test of a next edit away from the view, against the real server: the first
-- class loses its `(object)`, the next old-style class lies far below; the plugin marks the
-- edit there (a sign and virtual text) with a hint at the cursor, the first Tab jumps there and
-- previews it, the next Tab makes it, and the next edit is asked for at once. Writes what it
-- saw to $DRAFTLINE_RESULT (JSON) for tests/test_editor_nvim_next_edit.py to check.
local draftline = require('draftline')
local TIMEOUT_MS = 150000

local h = dofile(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)) .. '/helpers.lua')
local log, wait_until, feed, check, buffer_text = h.log, h.wait_until, h.feed, h.check, h.buffer_text
local ns = vim.api.nvim_create_namespace('draftline_next_edit')

local function marks(bufnr)
  return vim.api.nvim_buf_get_extmarks(bufnr, ns, 0, -1, { details = true })
end

local function signed_row(bufnr)
  for _, m in ipairs(marks(bufnr)) do
    if m[4].sign_text then
      return m[2]
    end
  end
end

local function run()
  local dir = vim.fn.tempname()
  vim.fn.mkdir(dir, 'p')
  local lines = { 'class Shape(object):', '    def __init__(self, name):', '        self.name = name', '' }
  for i = 0, 19 do
    vim.list_extend(lines, { ('def helper_%d(value):'):format(i), ('    return value + %d'):format(i), '' })
  end
  vim.list_extend(lines, { 'class Circle(object):', '    def __init__(self, radius):', '        self.radius = radius' })
  vim.fn.writefile(lines, dir .. '/shapes.py')
  vim.cmd.edit(dir .. '/shapes.py')
  local bufnr = vim.api.nvim_get_current_buf()
  wait_until('the server to attach', function() return #vim.lsp.get_clients({ name = 'draftline', bufnr = bufnr }) > 0 end)
  wait_until('the model to load', function() return (draftline.status() or {}).state == 'ready' end, TIMEOUT_MS)
  local client = vim.lsp.get_clients({ name = 'draftline', bufnr = bufnr })[1]
  local asked = {} -- when each next-edit request went out, and for which version
  local request = client.request
  client.request = function(self, method, params, ...)
    if method == 'draftline/nextEdit' then
      asked[#asked + 1] = { at = vim.uv.now(), version = params.version }
    end
    return request(self, method, params, ...)
  end

  vim.api.nvim_win_set_cursor(0, { 1, 0 })
  vim.api.nvim_buf_set_text(bufnr, 0, 11, 0, 19, {}) -- class Shape(object): -> class Shape:
  wait_until('the mark of an edit away from the view', function() return signed_row(bufnr) ~= nil end, 90000)
  local row, bottom = signed_row(bufnr), vim.fn.line('w$') - 1
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  params.version = vim.lsp.util.buf_versions[bufnr]
  local resp = client:request_sync('draftline/nextEdit', params, 90000, bufnr)
  check(resp and resp.result and resp.result.start.line == row, 'the sign stands at the start of the server\'s edit')
  local hint = false
  for _, m in ipairs(marks(bufnr)) do
    hint = hint or (m[2] == 0 and m[4].virt_text and m[4].virt_text[1][1]:find('next edit %(Tab%)') ~= nil)
  end
  check(hint, 'a hint at the cursor\'s line')

  local before = buffer_text(bufnr)
  feed('<Tab>')
  wait_until('the first Tab to jump', function() return vim.api.nvim_win_get_cursor(0)[1] - 1 == row end)
  wait_until('the preview at the edit', function() return #marks(bufnr) > 0 and signed_row(bufnr) == nil end)
  check(buffer_text(bufnr) == before, 'the jump leaves the text as it was')
  local jumped = vim.api.nvim_win_get_cursor(0)[1] - 1

  local made_at
  vim.api.nvim_buf_attach(bufnr, false, { on_lines = function() made_at = made_at or vim.uv.now() end })
  feed('<Tab>')
  wait_until('the next Tab to make the edit', function() return buffer_text(bufnr) ~= before end)
  local version = vim.lsp.util.buf_versions[bufnr]
  local function first_for(v)
    for _, a in ipairs(asked) do
      if a.version == v then
        return a
      end
    end
  end
  wait_until('the next edit asked for', function() return first_for(version) ~= nil end, 5000)

  local out = assert(io.open(assert(os.getenv('DRAFTLINE_RESULT')), 'w'))
  out:write(vim.json.encode({ before = before, edit = resp.result, after = buffer_text(bufnr), row = row,
                              bottom = bottom, jumped = jumped, asked_after_ms = first_for(version).at - made_at }))
  out:close()
  log('PASS ' .. (vim.version().minor >= 12 and '0.12' or '0.11'))
  vim.cmd('qall!')
end

h.run(run, TIMEOUT_MS + 120000)
