-- Minimal init for the headless plugin test: only this repository's plugin on the runtimepath.
local repo = vim.fs.dirname(vim.fs.dirname(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2))))
vim.opt.runtimepath:prepend(repo .. '/editors/nvim')
vim.opt.swapfile = false
vim.opt.shadafile = 'NONE'
require('draftline').setup({
  cmd = { repo .. '/.venv/bin/lsp_server', '--stdio', '--model', 'smollm2-135m' },
  filetypes = { 'python' },
  -- Generous: two shared CPU cores; speed is measured by the benchmark, not here.
  -- fp32: the exact mode, so that the accepted text can be checked against plain greedy decoding.
  settings = { maxTokens = 24, timeBudgetMs = 10000, dtype = 'fp32' },
})
