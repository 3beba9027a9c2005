-- Headless Neovim: a suggestion the server's time budget cuts (timeBudgetMs = 1: every request
-- is answered empty while its generation goes on) still reaches the user. The server sends
-- draftline/suggestionReady when it is done, the plugin asks again at the unmoved cursor, and
-- the ghost text comes from what the cut generation wrote. Exit code 0 = pass.
local repo = vim.fs.dirname(vim.fs.dirname(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2))))
local h = dofile(repo .. '/tests/editors/helpers.lua')
local draftline = h.start_plugin(repo, { maxTokens = 24, timeBudgetMs = 1, dtype = 'fp32' })
local TIMEOUT_MS = 150000

h.run(function()
  vim.cmd.edit(vim.fn.tempname() .. '.py')
  local bufnr = vim.api.nvim_get_current_buf()
  vim.api.nvim_buf_set_lines(bufnr, 0, -1, true, { 'def circle_area(radius):', '    ' })
  h.wait_until('the model to load', function() return (draftline.status() or {}).state == 'ready' end, TIMEOUT_MS)
  vim.api.nvim_win_set_cursor(0, { 2, 4 })
  h.feed('A')
  h.feed('return ')
  h.wait_until('ghost text after the server says it is ready', function() return h.ghost_text(bufnr) ~= '' end, 60000)
  local s = h.stats(bufnr)
  h.check(s.continued >= 1, 'the first request was cut by the budget: ' .. vim.inspect(s))
  -- Asked again at the same spot, the server answers from what the cut generation wrote.
  h.check(s.cacheHits >= 1, 'the second request was answered from the cache: ' .. vim.inspect(s))
  h.log('PASS ' .. tostring(vim.version()))
  vim.cmd('qa!')
end, TIMEOUT_MS + 60000)
