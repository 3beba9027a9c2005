-- A user writing real code in headless Neovim 0.12: for each line, type a newline and the line's
-- indentation, then pause; record whether ghost text appears within the wait and how long after
-- the pause it does; then type the rest of the line key by key and go on. Started by
-- scripts/pause_replay.py, which passes the settings below through the environment and reads
-- the JSON written to $REPLAY_OUT.
local here = vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2))
local repo = vim.fs.dirname(here)
local h = dofile(repo .. '/tests/editors/helpers.lua')
local env = vim.env
local first, count = tonumber(env.REPLAY_FIRST), tonumber(env.REPLAY_LINES)
local wait_ms, key_ms = tonumber(env.REPLAY_WAIT_MS), tonumber(env.REPLAY_KEY_MS)

vim.opt.runtimepath:prepend(repo .. '/editors/nvim')
vim.opt.swapfile = false
vim.cmd('filetype on')
local draftline = require('draftline')
local cmd = { repo .. '/.venv/bin/lsp_server', '--stdio' }
if (env.REPLAY_MODEL or '') ~= '' then
  vim.list_extend(cmd, { '--model', env.REPLAY_MODEL })
end
draftline.setup({ cmd = cmd, filetypes = { 'python' }, settings = vim.json.decode(env.REPLAY_SETTINGS or '{}') })

local function sleep(ms)
  local until_ms = vim.uv.now() + ms
  h.wait_until('a pause of ' .. ms .. ' ms', function() return vim.uv.now() >= until_ms end, ms + 1000)
end

h.run(function()
  local lines = vim.fn.readfile(env.REPLAY_FILE)
  vim.cmd.edit(env.REPLAY_COPY)
  local bufnr = vim.api.nvim_get_current_buf()
  -- The file as written so far, and what follows (an editor has the whole buffer).
  vim.api.nvim_buf_set_lines(bufnr, 0, -1, true, vim.list_slice(lines, 1, first))
  h.wait_until('the server to attach', function() return #vim.lsp.get_clients({ name = 'draftline', bufnr = bufnr }) > 0 end)
  local started = vim.uv.now()
  h.wait_until('the model to load', function() return (draftline.status() or {}).state == 'ready' end, 600000)
  local pauses = {}
  local loaded_ms = vim.uv.now() - started
  vim.api.nvim_win_set_cursor(0, { first, #lines[first] })
  h.feed('A')
  h.wait_until('insert mode', function() return vim.api.nvim_get_mode().mode == 'i' end)
  for i = first + 1, math.min(first + count, #lines) do
    local line = lines[i]
    local indent = line:match('^%s*')
    h.feed('<CR><C-u>' .. indent) -- a new line, exactly this indentation
    h.wait_until('the indentation', function()
      return vim.api.nvim_win_get_cursor(0)[1] == i and vim.api.nvim_get_current_line() == indent
    end)
    local pause = vim.uv.now()
    local shown_at
    h.wait_until('ghost text or the end of the pause', function()
      if h.ghost_text(bufnr) ~= '' then
        shown_at = shown_at or vim.uv.now()
        return true
      end
      return vim.uv.now() - pause >= wait_ms
    end, wait_ms + 5000)
    pauses[#pauses + 1] = { line = i - 1, shown = shown_at ~= nil, ms = shown_at and (shown_at - pause) or vim.NIL,
                            ghost = h.ghost_text(bufnr), expected = line:sub(#indent + 1) }
    h.feed('<C-]>') -- dismiss, then type the line as the file has it
    for c in line:sub(#indent + 1):gmatch('.') do
      h.feed(c == '<' and '<lt>' or c)
      sleep(key_ms)
    end
  end
  local out = assert(io.open(env.REPLAY_OUT, 'w'))
  out:write(vim.json.encode({ loaded_ms = loaded_ms, pauses = pauses }))
  out:close()
  vim.cmd('qa!')
end, 3600000)
