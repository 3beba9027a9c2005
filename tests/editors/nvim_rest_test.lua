-- Headless Neovim: where the cursor comes to rest on a new line in normal mode, the plugin tells
-- the server (draftline/cursor), which prefills the window there (its `prefetched` count grows).
-- Exit code 0 = pass.
local repo = vim.fs.dirname(vim.fs.dirname(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2))))
local h = dofile(repo .. '/tests/editors/helpers.lua')
local draftline = h.start_plugin(repo, { dtype = 'fp32' })
local TIMEOUT_MS = 150000

h.run(function()
  vim.cmd.edit(vim.fn.tempname() .. '.py')
  local bufnr = vim.api.nvim_get_current_buf()
  vim.api.nvim_buf_set_lines(bufnr, 0, -1, true, {
    'import math', '', '', 'def circle_area(radius):', '    return math.pi * radius ** 2', '', '',
    'def square_area(side):', '    return side * side', '' })
  h.wait_until('the model to load', function() return (draftline.status() or {}).state == 'ready' end, TIMEOUT_MS)
  for _, row in ipairs({ 5, 9 }) do
    local before = h.stats(bufnr).prefetched
    vim.api.nvim_win_set_cursor(0, { row, 0 })
    h.wait_until('the window at line ' .. row .. ' to be prefilled', function()
      return h.stats(bufnr).prefetched > before
    end, 30000)
  end
  h.log('PASS ' .. tostring(vim.version()))
  vim.cmd('qa!')
end, TIMEOUT_MS + 60000)
