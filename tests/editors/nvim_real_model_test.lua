-- Headless Neovim 0.12 with the plugin and no model setting: the server loads the default model.
-- At examples/shapes.py's `perimeter` body, entering insert mode after the indentation asks for a
-- suggestion; the ghost text must be what the server answers there. It is written to
-- $DRAFTLINE_RESULT for tests/test_real_models.py to check. Exit code 0 = pass.
-- Run: DRAFTLINE_RESULT=/tmp/g.txt nvim --headless -u NONE -i NONE -c 'luafile tests/editors/nvim_real_model_test.lua'
local here = vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2))
local repo = vim.fs.dirname(vim.fs.dirname(here))
local h = dofile(here .. '/helpers.lua')
local LOAD_MS = 300000 -- a first start may fetch the model

vim.opt.runtimepath:prepend(repo .. '/editors/nvim')
vim.opt.swapfile = false
vim.cmd('filetype on')
local draftline = require('draftline')
-- No time budget: this checks what is suggested, not how fast (a loaded machine may take longer
-- than the default budget for the invoked request below, which samples an alternative too).
draftline.setup({ cmd = { repo .. '/.venv/bin/lsp_server', '--stdio' }, filetypes = { 'python' },
                  settings = { timeBudgetMs = 0 } })

h.run(function()
  vim.cmd.edit(repo .. '/examples/shapes.py')
  local bufnr = vim.api.nvim_get_current_buf()
  h.wait_until('the server to attach', function() return #vim.lsp.get_clients({ name = 'draftline', bufnr = bufnr }) > 0 end)
  h.wait_until('the model to load', function() return (draftline.status() or {}).state == 'ready' end, LOAD_MS)
  vim.api.nvim_win_set_cursor(0, { 25, 8 }) -- line 25: the perimeter's body, after its indentation
  h.feed('A')
  h.wait_until('ghost text', function() return h.ghost_text(bufnr) ~= '' end, 60000)
  local shown = h.ghost_text(bufnr)
  local expected = h.server_suggestion(bufnr)
  h.check(shown == expected, 'ghost text ' .. vim.inspect(shown) .. ' is the server text ' .. vim.inspect(expected))
  local out = assert(io.open(assert(os.getenv('DRAFTLINE_RESULT'), 'DRAFTLINE_RESULT unset'), 'w'))
  out:write(shown)
  out:close()
  vim.cmd('stopinsert')
  vim.cmd('qa!')
end, LOAD_MS + 120000)
