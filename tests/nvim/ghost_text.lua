-- Headless Neovim 0.12: start `lsp_server --stdio`, type into a Python buffer with native
-- inline completion on, wait for the ghost text, accept it, and write what happened to
-- $DRAFTLINE_OUT as JSON. Driven by tests/test_nvim_ghost_text.py.
local out_path = assert(os.getenv('DRAFTLINE_OUT'))
local python = assert(os.getenv('DRAFTLINE_PYTHON'))
local result = {}

local function finish(err)
  result.error = err
  result.lines = vim.api.nvim_buf_get_lines(0, 0, -1, false)
  local f = assert(io.open(out_path, 'w'))
  f:write(vim.json.encode(result))
  f:close()
  vim.cmd('qall!')
end

local ok, err = pcall(function()
  vim.cmd('edit ' .. os.getenv('DRAFTLINE_FILE'))
  vim.bo.autoindent = false -- type the indentation literally, as the test gives it
  local client_id = assert(vim.lsp.start({
    name = 'draftline',
    cmd = { python, '-m', 'lsp_server.cli', '--stdio', '--threads', '2' },
    root_dir = vim.fn.getcwd(),
    init_options = { dtype = 'fp32', timeBudgetMs = 0, maxTokens = 48 },
  }))
  local client = assert(vim.lsp.get_client_by_id(client_id))
  local ready = vim.wait(120000, function()
    local resp = client:request_sync('workspace/executeCommand', { command = 'draftline.stats' }, 5000)
    return resp and resp.result and resp.result.state == 'ready'
  end, 500)
  assert(ready, 'model did not become ready')
  vim.lsp.inline_completion.enable(true)

  -- Type a new last line like a user; the keys are processed by the main loop once this
  -- script returns, and timers below watch for the ghost text and accept it.
  vim.api.nvim_win_set_cursor(0, { vim.api.nvim_buf_line_count(0), 0 })
  vim.api.nvim_input('o' .. os.getenv('DRAFTLINE_TYPE'))
  local ns = vim.api.nvim_create_namespace('nvim.lsp.inline_completion')
  local waited = 0
  local function poll()
    local marks = vim.api.nvim_buf_get_extmarks(0, ns, 0, -1, { details = true })
    if #marks == 0 then
      waited = waited + 100
      if waited > 60000 then return finish('no ghost text appeared') end
      return vim.defer_fn(poll, 100)
    end
    local ghost = {}
    for _, chunk in ipairs(marks[1][4].virt_text or {}) do
      table.insert(ghost, chunk[1])
    end
    result.ghost = table.concat(ghost)
    result.line_before_accept = vim.api.nvim_get_current_line()
    if not vim.lsp.inline_completion.get() then return finish('nothing to accept') end
    vim.defer_fn(function() -- after the accept and its didAccept command
      local resp = client:request_sync('workspace/executeCommand', { command = 'draftline.stats' }, 5000)
      result.stats = resp and resp.result
      finish(nil)
    end, 1000)
  end
  vim.defer_fn(poll, 100)
end)
if not ok then finish(tostring(err)) end
