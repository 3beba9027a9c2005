-- Headless Neovim test of the Draftline plugin against the real server: type into a Python buffer,
-- see the ghost text, dismiss it, accept a word and then all of it, then a multi-line
-- suggestion; check the ghost text and the buffer against what the server itself answers for
-- the same position, and the server's counts of full and partial accepts. Writes the typed
-- prefix and the accepted buffer to $DRAFTLINE_RESULT (JSON) for tests/test_editor_nvim.py to
-- check against the model's greedy text. Exit code 0 = pass; failures go to stderr.
-- Run: DRAFTLINE_RESULT=/tmp/r.json nvim --headless -u tests/editors/minimal_init.lua -c 'luafile tests/editors/nvim_plugin_test.lua'
local draftline = require('draftline')
local TIMEOUT_MS = 150000

local h = dofile(vim.fs.dirname(debug.getinfo(1, 'S').source:sub(2)) .. '/helpers.lua')
local log, fail, wait_until, feed, check = h.log, h.fail, h.wait_until, h.feed, h.check
local ghost_text, server_suggestion, stats, buffer_text = h.ghost_text, h.server_suggestion, h.stats, h.buffer_text

local function run()
  local dir = vim.fn.tempname()
  vim.fn.mkdir(dir, 'p')
  vim.cmd.edit(dir .. '/shapes.py')
  local bufnr = vim.api.nvim_get_current_buf()
  vim.api.nvim_buf_set_lines(bufnr, 0, -1, true, {
    'import math',
    '',
    '',
    'def circle_area(radius):',
    '    """Return the area of a circle."""',
    '    ',
  })
  wait_until('the server to attach', function() return #vim.lsp.get_clients({ name = 'draftline', bufnr = bufnr }) > 0 end)
  wait_until('the model to load', function() return (draftline.status() or {}).state == 'ready' end, TIMEOUT_MS)
  check(draftline.statusline():match('^Draftline ready'), 'statusline: ' .. draftline.statusline())

  -- Type at the end of the last line, as a user would.
  vim.api.nvim_win_set_cursor(0, { 6, 4 })
  feed('A')
  feed('return ')
  wait_until('insert mode and typed text', function()
    return vim.api.nvim_get_mode().mode == 'i' and vim.api.nvim_get_current_line() == '    return '
  end)
  wait_until('ghost text', function() return ghost_text(bufnr) ~= '' end)
  local shown = ghost_text(bufnr)
  local before = buffer_text(bufnr)
  local expected = server_suggestion(bufnr)
  log('suggestion: ' .. vim.inspect(shown) .. ' server: ' .. vim.inspect(expected))
  check(expected and expected ~= '', 'the server answers at the cursor')
  check(shown == expected, 'ghost text ' .. vim.inspect(shown) .. ' is the server text ' .. vim.inspect(expected))

  -- Dismiss (<C-]>): the ghost text goes, the buffer and insert mode stay, and it does not come
  -- back by itself (0.12 would re-request 200 ms after a cursor move).
  feed('<C-]>')
  wait_until('the dismissed ghost text to go', function() return ghost_text(bufnr) == '' end, 5000)
  local dismissed_at = vim.uv.now()
  wait_until('a second after the dismiss', function() return vim.uv.now() - dismissed_at > 1000 end)
  check(ghost_text(bufnr) == '', 'the dismissed ghost text stays away: ' .. vim.inspect(ghost_text(bufnr)))
  check(buffer_text(bufnr) == before and vim.api.nvim_get_mode().mode == 'i', 'dismiss leaves the buffer alone')
  -- Moving the cursor asks again, at the same spot: the same suggestion. (Two keys apart: moving
  -- there and back within one batch of typeahead is no CursorMovedI.)
  feed('<Left>')
  wait_until('the cursor to move left', function() return vim.api.nvim_win_get_cursor(0)[2] == #'    return ' - 1 end)
  feed('<Right>')
  wait_until('ghost text after the dismiss', function() return ghost_text(bufnr) ~= '' end)
  check(ghost_text(bufnr) == expected, 'the same ghost text again: ' .. vim.inspect(ghost_text(bufnr)))

  -- Accept one word: the buffer grows by a prefix of the suggestion, not all of it, and the
  -- server counts a partial accept of that many characters.
  local stats0 = stats(bufnr)
  feed('<M-Right>')
  wait_until('the word to be inserted', function() return buffer_text(bufnr) ~= before end)
  local after_word = buffer_text(bufnr)
  local word = after_word:sub(#before + 1)
  check(vim.startswith(before .. expected, after_word), 'word accept inserts a prefix: ' .. vim.inspect(after_word))
  check(#after_word < #(before .. expected) or not expected:find('%s'), 'word accept inserts less than all')
  wait_until('the server to count the partial accept', function() return stats(bufnr).partiallyAccepted == stats0.partiallyAccepted + 1 end, 10000)
  local stats1 = stats(bufnr)
  check(stats1.acceptedChars == stats0.acceptedChars + vim.str_utfindex(word, 'utf-16'),
    'acceptedChars grew by the word ' .. vim.inspect(word) .. ': ' .. vim.inspect(stats1))
  check(stats1.accepted == stats0.accepted, 'a partial accept is not a full one')

  -- Accept the rest with <Tab>: the buffer is the typed text plus the server's suggestion.
  wait_until('ghost text after the word', function() return ghost_text(bufnr) ~= '' end)
  feed('<Tab>')
  wait_until('the rest to be inserted', function() return buffer_text(bufnr) == before .. expected end, 30000)
  wait_until('the server to count the acceptance', function() return stats(bufnr).accepted == stats0.accepted + 1 end, 10000)
  check(stats(bufnr).partiallyAccepted == stats1.partiallyAccepted, 'a full accept is not a partial one')
  -- For the test's Python side: the accepted line against the model's own greedy text.
  local out = assert(io.open(assert(os.getenv('DRAFTLINE_RESULT'), 'DRAFTLINE_RESULT unset'), 'w'))
  out:write(vim.json.encode({ prefix = before, accepted = buffer_text(bufnr) }))
  out:close()

  vim.cmd('stopinsert')
  wait_until('normal mode', function() return vim.api.nvim_get_mode().mode == 'n' end)

  -- A line that opens a block gets a multi-line suggestion (ghost text on virtual lines).
  vim.api.nvim_buf_set_lines(bufnr, -1, -1, true, { '', '', 'def circumference(radius)' })
  vim.api.nvim_win_set_cursor(0, { vim.api.nvim_buf_line_count(bufnr), 0 })
  feed('A:')
  wait_until('the typed colon', function() return vim.api.nvim_get_current_line() == 'def circumference(radius):' end)
  wait_until('multi-line ghost text', function() return ghost_text(bufnr):find('\n') ~= nil end)
  local block_shown, block_before = ghost_text(bufnr), buffer_text(bufnr)
  local block = server_suggestion(bufnr)
  log('block suggestion: ' .. vim.inspect(block_shown))
  check(block_shown == block, 'multi-line ghost text ' .. vim.inspect(block_shown) .. ' is the server text ' .. vim.inspect(block))
  feed('<Tab>')
  wait_until('the block to be inserted', function() return buffer_text(bufnr) == block_before .. block end, 30000)
  vim.cmd('stopinsert')
  wait_until('normal mode', function() return vim.api.nvim_get_mode().mode == 'n' end)

  -- Typing what the ghost text shows keeps the rest of it; typing something else takes it away
  -- at once, before the next answer, and nothing of it stays on the line the cursor leaves.
  vim.api.nvim_buf_set_lines(bufnr, -1, -1, true, { '', '', 'def square(side):', '    """Return the square of side."""', '    return ' })
  vim.api.nvim_win_set_cursor(0, { vim.api.nvim_buf_line_count(bufnr), 0 })
  feed('A')
  wait_until('ghost text to type through', function() return ghost_text(bufnr):match('^[^\n][^\n]') ~= nil end)
  local through = ghost_text(bufnr):match('^[^\n]*')
  feed(through:sub(1, 1))
  wait_until('the first shown character typed', function() return vim.api.nvim_get_current_line() == '    return ' .. through:sub(1, 1) end)
  check(ghost_text(bufnr):match('^[^\n]*') == through:sub(2), 'typed through: ' .. vim.inspect(ghost_text(bufnr)) .. ' from ' .. vim.inspect(through))
  local other = through:sub(2, 2) == '#' and '@' or '#'
  feed(other)
  wait_until('a character the ghost text does not show', function() return vim.api.nvim_get_current_line():sub(-1) == other end)
  check(ghost_text(bufnr) == '', 'a suggestion typed against is hidden: ' .. vim.inspect(ghost_text(bufnr)))
  wait_until('ghost text again, from an answer there', function() return ghost_text(bufnr) ~= '' end, 30000)
  feed('<CR>')
  local left = vim.api.nvim_buf_line_count(bufnr) - 1
  wait_until('a new line', function() return vim.api.nvim_win_get_cursor(0)[1] == left + 1 end)
  for _, mark in ipairs(vim.api.nvim_buf_get_extmarks(bufnr, -1, 0, -1, { details = true })) do
    check(mark[2] ~= left - 1 or not mark[4].virt_text, 'ghost text left on the line above: ' .. vim.inspect(mark))
  end
  vim.cmd('stopinsert')
  wait_until('normal mode', function() return vim.api.nvim_get_mode().mode == 'n' end)
  local c = vim.api.nvim_get_commands({})['Draftline']
  check(c ~= nil, ':Draftline exists')
  local s = stats(bufnr)
  local text = draftline.format_stats(s)
  check(text:find(('%d accepted of %d shown, %d partly (%d chars)'):format(s.accepted, s.shown, s.partiallyAccepted, s.acceptedChars), 1, true),
    'stats text: ' .. text)
  log('PASS ' .. tostring(vim.version()))
  vim.cmd('qa!')
end

h.run(run, TIMEOUT_MS + 60000)
