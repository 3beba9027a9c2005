-- Neovim 0.12+: the native `vim.lsp.inline_completion` shows the ghost text; this adds
-- accepting a word / line of it and dismissing it (both through `get{ on_accept }`).
local accept = require('draftline.accept')
local M = {}

function M.attach(_, client_id)
  vim.lsp.inline_completion.enable(true, { client_id = client_id })
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
