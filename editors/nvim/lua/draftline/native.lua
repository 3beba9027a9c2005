-- Neovim 0.12+: the native `vim.lsp.inline_completion` shows the ghost text; this adds
-- accepting a word / line of it and dismissing it (both through `get{ on_accept }`).
local accept = require('draftline.accept')
local M = {}

-- 0.12 draws its current item again at every key until the next answer comes: from the first
-- character where item and line differ, and still on the line it was asked on once the cursor
-- has left it, so the rest of an old suggestion is overlaid on what was typed. Its item is not
-- public; where this Neovim keeps it elsewhere, nothing is hidden here.
local function current_item(bufnr)
  local capabilities = vim.lsp._capability and vim.lsp._capability.all
  local completor = capabilities and capabilities.inline_completion and capabilities.inline_completion.active[bufnr]
  return completor and completor.current
end

--- Whether what was typed since the item's start is still the start of its text (typing through).
local function typed_through(item)
  if not item.range then
    return true
  end
  local row, col = unpack(vim.api.nvim_win_get_cursor(0))
  local start = item.range.start
  if row - 1 ~= start.row or col < start.col then
    return false
  end
  local typed = vim.api.nvim_get_current_line():sub(start.col + 1, col)
  local text = type(item.insert_text) == 'string' and item.insert_text or item.insert_text.value
  return text:sub(1, #typed) == typed
end

function M.attach(bufnr, client_id)
  vim.lsp.inline_completion.enable(true, { client_id = client_id })
  -- After 0.12's own handler of the same events (defined first, so run first): it has drawn the
  -- item again; take it away where the typing has left it behind.
  vim.api.nvim_create_autocmd({ 'CursorMovedI', 'TextChangedI' }, {
    group = vim.api.nvim_create_augroup('draftline-typed-through-' .. bufnr, { clear = true }),
    buffer = bufnr,
    callback = function()
      local item = current_item(bufnr)
      if item and not typed_through(item) then
        M.dismiss()
      end
    end,
  })
end

local function to_suggestion(bufnr, item)
  local text = type(item.insert_text) == 'string' and item.insert_text or item.insert_text.value
  local row, col
  if item.range then
    row, col = item.range.start.row, item.range.start.col
  else
    local cursor = vim.api.nvim_win_get_cursor(0)
    row, col = cursor[1] - 1, cursor[2]
  end
  return { text = text, row = row, col = col, client_id = item.client_id, command = item.command,
           uri = vim.uri_from_bufnr(bufnr) }
end

--- Accept the visible suggestion; false when there is none. Safe in an <expr> mapping.
---@param how 'all'|'word'|'line'
function M.accept(how)
  if how == 'all' then
    return vim.lsp.inline_completion.get()
  end
  local bufnr = vim.api.nvim_get_current_buf()
  return vim.lsp.inline_completion.get({
    on_accept = function(item)
      accept.apply(bufnr, to_suggestion(bufnr, item), how)
    end,
  })
end

--- Ask again at the cursor (the server has a suggestion ready there): the native client asks on
--- CursorMovedI, after its own 200 ms debounce.
function M.ask_again(bufnr)
  vim.api.nvim_exec_autocmds('CursorMovedI', { buffer = bufnr, modeline = false })
end

--- Hide the visible suggestion (until the next edit); false when there is none. 0.12 has no
--- public "dismiss": `get()` clears the suggestion and cancels the pending request before it
--- hands the item to `on_accept`, which drops it here.
function M.dismiss()
  return vim.lsp.inline_completion.get({ on_accept = function() end })
end

return M
