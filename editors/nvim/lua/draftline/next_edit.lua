-- Next-edit suggestions: after a pause following an edit, ask the server (`draftline/nextEdit`)
-- for the matching change where it is due and preview it: what goes is highlighted, what comes
-- is shown as virtual lines below it (inline ghost text when it only inserts on one line). An
-- edit outside the window's visible lines is first marked: a sign and virtual text at its line,
-- and a hint at the cursor's; Tab jumps there and previews it, the next Tab makes it. Once made,
-- the next one is asked for at once. Esc or any change to the buffer dismisses it. An edit is
-- only shown and made for the buffer version it was computed for.
local debounce = require('draftline.debounce')
local M = {}

local ns = vim.api.nvim_create_namespace('draftline_next_edit')
---@type table<integer, { edit: table, version: integer, client_id: integer, away: boolean }>
local shown = {}

local function version_of(bufnr)
  return vim.lsp.util.buf_versions[bufnr]
end

--- An LSP position of the edit as a (row, byte column) of the buffer.
local function byte_pos(bufnr, pos, encoding)
  local line = vim.api.nvim_buf_get_lines(bufnr, pos.line, pos.line + 1, false)[1] or ''
  return pos.line, vim.str_byteindex(line, encoding, math.min(pos.character, vim.str_utfindex(line, encoding)), false)
end

--- Remove the preview of `bufnr`; false when none was shown.
function M.dismiss(bufnr)
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  vim.api.nvim_buf_clear_namespace(bufnr, ns, 0, -1)
  local had = shown[bufnr] ~= nil
  shown[bufnr] = nil
  return had
end

--- Whether buffer `row` lies outside the current window's visible lines.
local function out_of_view(row)
  return row < vim.fn.line('w0') - 1 or row > vim.fn.line('w$') - 1
end

--- An edit away from the view: a sign and the new text at its line, a hint at the cursor's.
local function mark(bufnr, edit, srow)
  local text = vim.trim((edit.text:gsub('%s*\n%s*', ' ⏎ ')))
  vim.api.nvim_buf_set_extmark(bufnr, ns, srow, 0, { sign_text = '→', sign_hl_group = 'DiffAdd',
                                                     virt_text = { { ' next edit: ' .. text, 'DiffAdd' } } })
  local cursor = vim.api.nvim_win_get_cursor(0)[1] - 1
  local where = srow > cursor and ('↓ line ' .. (srow + 1)) or ('↑ line ' .. (srow + 1))
  vim.api.nvim_buf_set_extmark(bufnr, ns, cursor, 0, { virt_text = { { ' ' .. where .. ': next edit (Tab)', 'Comment' } } })
end

local function preview(bufnr, edit, enc)
  local srow, scol = byte_pos(bufnr, edit.start, enc)
  local erow, ecol = byte_pos(bufnr, edit['end'], enc)
  if srow == erow and scol == ecol and not edit.text:find('\n') then
    -- Only an insertion on one line: ghost text where it goes.
    vim.api.nvim_buf_set_extmark(bufnr, ns, srow, scol, { virt_text = { { edit.text, 'DiffAdd' } },
                                                         virt_text_pos = 'inline' })
  else
    vim.api.nvim_buf_set_extmark(bufnr, ns, srow, scol, { end_row = erow, end_col = ecol, hl_group = 'DiffDelete' })
    local first = vim.api.nvim_buf_get_lines(bufnr, srow, srow + 1, false)[1]
    local last = vim.api.nvim_buf_get_lines(bufnr, erow, erow + 1, false)[1]
    local lines = {}
    for _, l in ipairs(vim.split(first:sub(1, scol) .. edit.text .. last:sub(ecol + 1), '\n', { plain = true })) do
      lines[#lines + 1] = { { l, 'DiffAdd' } }
    end
    vim.api.nvim_buf_set_extmark(bufnr, ns, erow, 0, { virt_lines = lines })
  end
end

local function show(bufnr, edit, client)
  M.dismiss(bufnr)
  local srow = byte_pos(bufnr, edit.start, client.offset_encoding)
  local away = out_of_view(srow)
  if away then
    mark(bufnr, edit, srow)
  else
    preview(bufnr, edit, client.offset_encoding)
  end
  shown[bufnr] = { edit = edit, version = edit.version, client_id = client.id, away = away }
end

--- Ask for the next edit at the cursor of `bufnr` (its current version).
function M.request(bufnr, client_id)
  local client = vim.lsp.get_client_by_id(client_id)
  if not client or bufnr ~= vim.api.nvim_get_current_buf() then
    return
  end
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  params.version = version_of(bufnr)
  client:request('draftline/nextEdit', params, function(err, edit)
    if err or type(edit) ~= 'table' or edit.version ~= version_of(bufnr) then
      return -- none, or the buffer has changed since: never shown for another version
    end
    show(bufnr, edit, client)
  end, bufnr)
end

--- Move the cursor to the marked edit and preview it there.
local function jump(bufnr, s, client)
  local row, col = byte_pos(bufnr, s.edit.start, client.offset_encoding)
  vim.schedule(function() -- not inside an <expr> mapping, where the cursor may not move
    vim.api.nvim_win_set_cursor(0, { row + 1, col })
    vim.api.nvim_buf_clear_namespace(bufnr, ns, 0, -1)
    preview(bufnr, s.edit, client.offset_encoding)
  end)
  shown[bufnr] = vim.tbl_extend('force', s, { away = false })
end

--- Jump to the marked edit, or make the previewed one and put the cursor at its end (then ask
--- for the next at once); false when none is shown (or the buffer is no longer at the edit's
--- version: then the preview is dropped).
function M.accept(bufnr)
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  local s = shown[bufnr]
  if not s then
    return false
  end
  local client = vim.lsp.get_client_by_id(s.client_id)
  if not client or version_of(bufnr) ~= s.version then
    M.dismiss(bufnr)
    return false
  end
  if s.away then
    jump(bufnr, s, client)
    return true
  end
  M.dismiss(bufnr)
  local e = s.edit
  vim.schedule(function() -- not inside an <expr> mapping, where the buffer may not change
    vim.lsp.util.apply_text_edits({ { range = { start = e.start, ['end'] = e['end'] }, newText = e.text } }, bufnr,
      client.offset_encoding)
    local lines = vim.split(e.text, '\n', { plain = true })
    local row = e.start.line + #lines - 1
    local line = vim.api.nvim_buf_get_lines(bufnr, row, row + 1, false)[1] or ''
    local col = #lines > 1 and #lines[#lines] or (select(2, byte_pos(bufnr, e.start, client.offset_encoding)) + #lines[1])
    vim.api.nvim_win_set_cursor(0, { row + 1, math.max(0, math.min(col, #line) - 1) })
    M.request(bufnr, client.id)
  end)
  return true
end

--- Watch `bufnr`: each change dismisses the preview and, after `delay_ms` without another,
--- asks for the next edit.
function M.attach(bufnr, client_id, delay_ms)
  local later = debounce.per_buffer(bufnr, delay_ms, function() M.request(bufnr, client_id) end,
    function() shown[bufnr] = nil end)
  vim.api.nvim_create_autocmd({ 'TextChanged', 'TextChangedI' }, {
    group = vim.api.nvim_create_augroup('draftline_next_edit_' .. bufnr, { clear = true }),
    buffer = bufnr,
    callback = function()
      M.dismiss(bufnr)
      later()
    end,
  })
end

--- Normal-mode keys: `accept` makes the previewed edit, `dismiss` hides it; without a
--- preview each key does what it did before.
function M.set_keymaps(keys)
  for name, lhs in pairs(keys) do
    if lhs then
      vim.keymap.set('n', lhs, function()
        return M[name]() and '' or lhs
      end, { expr = true, replace_keycodes = true, desc = 'Draftline: next edit ' .. name })
    end
  end
end

return M
