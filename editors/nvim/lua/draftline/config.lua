-- Defaults, the user's overrides, and where the server executable is.
local M = {}

M.defaults = {
  -- Server executable; nil: the nearest .venv/bin/lsp_server (from the working directory up,
  -- then this plugin's own checkout), else `lsp_server` on PATH.
  cmd = nil,
  filetypes = { 'python', 'javascript', 'typescript', 'go', 'rust', 'c', 'cpp', 'java', 'lua', 'sh' },
  -- Server settings (README.md, Settings), e.g. { maxTokens = 32, mode = 'hybrid' }; vim.NIL sends
  -- null. Sent as initializationOptions and as workspace/didChangeConfiguration section
  -- `draftline`. Only these are sent: the server's command line (`cmd`) and its own defaults
  -- decide the rest.
  settings = {},
  -- Insert-mode keys; false skips one. Without a suggestion each key does what it did before.
  keymaps = {
    accept = '<Tab>',
    accept_word = '<M-Right>',
    accept_line = '<M-Down>',
    dismiss = '<C-]>',
  },
  -- Next-edit suggestions: asked for this long after the last change; in normal mode `accept`
  -- jumps to an edit marked out of view, or makes the previewed one, `dismiss` hides it (in
  -- insert mode the keys above do: accept when no inline suggestion is shown). false skips a key.
  next_edit = {
    delay_ms = 600,
    keymaps = { accept = '<Tab>', dismiss = '<Esc>' },
  },
  -- The server prefills the window where the cursor has rested this long on a new line (normal
  -- mode), or at once on opening or entering a file, before the first request there.
  rest_ms = 200,
  -- Neovim 0.11 only (0.12 uses its native inline completion, which debounces 200 ms itself).
  debounce_ms = 150,
  -- Use the extmark fallback even where native inline completion exists.
  force_fallback = false,
}

--- Where this plugin's checkout is (editors/nvim/lua/draftline/config.lua -> repository root).
local function plugin_root()
  local here = debug.getinfo(1, 'S').source:sub(2)
  return vim.fs.dirname(vim.fs.dirname(vim.fs.dirname(vim.fs.dirname(vim.fs.dirname(here)))))
end

---@return string[] the command that starts the server on stdio
function M.server_cmd(cmd)
  if type(cmd) == 'table' then
    return cmd
  end
  if type(cmd) == 'string' then
    return { cmd, '--stdio' }
  end
  local venv = vim.fs.find('.venv/bin/lsp_server', { upward = true, path = vim.uv.cwd() })[1]
  if not venv then
    local own = vim.fs.joinpath(plugin_root(), '.venv', 'bin', 'lsp_server')
    venv = vim.uv.fs_stat(own) and own or nil
  end
  return { venv or 'lsp_server', '--stdio' }
end

function M.merge(opts)
  return vim.tbl_deep_extend('force', vim.deepcopy(M.defaults), opts or {})
end

return M
