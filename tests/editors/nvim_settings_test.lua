-- Headless Neovim: the plugin sends the server only the settings given to setup(), so the
-- server's own command-line flags stand. The server is started with a model that does not
-- exist; sending any `model` (e.g. the default model's name) would override it and load a model.
-- Exit code 0 = pass; failures go to stderr.
-- Run: nvim --headless -u NONE -i NONE -c 'luafile tests/editors/nvim_settings_test.lua'
local repo = vim.fs.dirname(vim.fs.dirname(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2))))
local MISSING = '/nonexistent/draftline-model.gguf'

local function fail(msg)
  io.stderr:write('FAIL: ' .. msg .. '\n')
  vim.cmd('cquit 1')
end

vim.opt.runtimepath:prepend(repo .. '/editors/nvim')
vim.opt.swapfile = false
vim.cmd('filetype on')
local draftline = require('draftline')
draftline.setup({
  cmd = { repo .. '/.venv/bin/lsp_server', '--stdio', '--model', MISSING },
  filetypes = { 'python' },
  settings = { maxTokens = 8 },
})
vim.cmd.edit(vim.fn.tempname() .. '.py')

local settled = vim.wait(120000, function()
  local s = draftline.status()
  return s ~= nil and (s.state == 'error' or s.state == 'ready')
end, 50)
if not settled then
  fail('the server neither failed nor got ready: ' .. vim.inspect(draftline.status()))
end
local s = draftline.status()
if s.state ~= 'error' or not s.message:find(MISSING, 1, true) then
  fail('the server kept its --model: ' .. vim.inspect(s))
end
local client = vim.lsp.get_clients({ name = 'draftline' })[1]
if not vim.deep_equal(client.config.init_options, { maxTokens = 8 }) then
  fail('initializationOptions: ' .. vim.inspect(client.config.init_options))
end
io.stderr:write('PASS ' .. tostring(vim.version()) .. '\n')
vim.cmd('qa!')
