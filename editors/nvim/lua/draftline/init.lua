-- Draftline for Neovim: starts `lsp_server --stdio` through vim.lsp.config / vim.lsp.enable and
-- shows its inline completions (native on 0.12+, extmark ghost text on 0.11).
local config = require('draftline.config')
local next_edit = require('draftline.next_edit')
local rest = require('draftline.rest')
local M = {}

---@type { state: string, message?: string, lastLatencyMs?: number, acceptanceRate?: number }?
local status = nil

local function client()
  return vim.lsp.get_clients({ name = 'draftline' })[1]
end

local function on_status(_, result)
  status = result
  vim.cmd.redrawstatus({ bang = true, mods = { emsg_silent = true } })
end

--- Statusline component: "Draftline ready 84ms 40%" (last latency; drafted tokens the model
--- accepted), "" before the server starts.
function M.statusline()
  if not status then
    return ''
  end
  local parts = { 'Draftline', status.state }
  if status.state == 'ready' then
    if type(status.lastLatencyMs) == 'number' then
      parts[#parts + 1] = string.format('%dms', math.floor(status.lastLatencyMs + 0.5))
    end
    if type(status.acceptanceRate) == 'number' then
      parts[#parts + 1] = string.format('%d%%', math.floor(status.acceptanceRate * 100 + 0.5))
    end
  end
  return table.concat(parts, ' ')
end

--- The last `draftline/status` the server sent (nil before the first).
function M.status()
  return status
end

local function server_command(name, on_result)
  local c = client()
  if not c then
    vim.notify('Draftline: the server is not running', vim.log.levels.WARN)
    return
  end
  c:request('workspace/executeCommand', { command = name, arguments = {} }, function(err, result)
    if err then
      vim.notify('Draftline: ' .. err.message, vim.log.levels.ERROR)
    elseif on_result then
      on_result(result)
    end
  end)
end

local function ms(v)
  return type(v) == 'number' and string.format('%d ms', math.floor(v + 0.5)) or 'n/a'
end

--- Format the server's `draftline.stats` answer.
function M.format_stats(s)
  local rate = type(s.acceptanceRate) == 'number' and string.format('%d%%', math.floor(s.acceptanceRate * 100 + 0.5)) or 'n/a'
  return string.format(
    'Draftline (%s): %d requests, %d generated, %d accepted of %d shown, %d partly (%d chars), %d cancelled, %d cache hits; draft tokens accepted %s; latency p50 %s, p95 %s, last %s',
    s.state, s.requests, s.generated, s.accepted, s.shown, s.partiallyAccepted, s.acceptedChars, s.cancelled, s.cacheHits,
    rate, ms(s.p50Ms), ms(s.p95Ms), ms(s.lastLatencyMs))
end

local subcommands = {
  stats = function()
    server_command('draftline.stats', function(s) vim.notify(M.format_stats(s)) end)
  end,
  toggle = function()
    server_command('draftline.toggle', function(r) vim.notify('Draftline ' .. (r.enabled and 'on' or 'off')) end)
  end,
  status = function()
    vim.notify(M.statusline() ~= '' and M.statusline() or 'Draftline: not started')
  end,
}

local function set_keymaps(keymaps, impl)
  local actions = { accept = 'all', accept_word = 'word', accept_line = 'line' }
  for name, lhs in pairs(keymaps) do
    if lhs then
      vim.keymap.set('i', lhs, function()
        local done
        if name == 'dismiss' then
          done = impl.dismiss() or next_edit.dismiss()
        else
          done = impl.accept(actions[name]) or (name == 'accept' and next_edit.accept())
        end
        -- Without a suggestion the key keeps its usual meaning.
        return done and '' or lhs
      end, { expr = true, replace_keycodes = true, desc = 'Draftline: ' .. name:gsub('_', ' ') })
    end
  end
end

-- A request answered empty at the server's time budget has its suggestion now: ask again if the
-- cursor is still where it was (the server then answers from its cache at once).
local function on_suggestion_ready(_, params)
  local bufnr = vim.uri_to_bufnr(params.uri)
  if bufnr ~= vim.api.nvim_get_current_buf() or not vim.api.nvim_get_mode().mode:match('^i') then
    return
  end
  local row, col = unpack(vim.api.nvim_win_get_cursor(0))
  local character = vim.str_utfindex(vim.api.nvim_get_current_line(), 'utf-16', col, false)
  if row - 1 == params.position.line and character == params.position.character then
    M.impl.ask_again(bufnr)
  end
end

function M.setup(opts)
  local cfg = config.merge(opts)
  local impl = (vim.lsp.inline_completion and not cfg.force_fallback) and require('draftline.native')
    or require('draftline.ghost')
  M.config, M.impl = cfg, impl
  vim.lsp.config('draftline', {
    cmd = config.server_cmd(cfg.cmd),
    -- torch's idle OpenMP threads spin; passive waiting keeps the editor responsive.
    cmd_env = { OMP_WAIT_POLICY = 'PASSIVE' },
    filetypes = cfg.filetypes,
    root_markers = { '.git', 'pyproject.toml', 'package.json' },
    -- Nothing when the user set nothing: an empty table would go out as a JSON array.
    init_options = next(cfg.settings) and cfg.settings or nil,
    settings = next(cfg.settings) and { draftline = cfg.settings } or nil,
    handlers = { ['draftline/status'] = on_status, ['draftline/suggestionReady'] = on_suggestion_ready },
  })
  vim.lsp.enable('draftline')
  vim.api.nvim_create_autocmd('LspAttach', {
    group = vim.api.nvim_create_augroup('draftline', { clear = true }),
    callback = function(args)
      local c = vim.lsp.get_client_by_id(args.data.client_id)
      if c and c.name == 'draftline' then
        impl.attach(args.buf, c.id, cfg.debounce_ms)
        next_edit.attach(args.buf, c.id, cfg.next_edit.delay_ms)
        rest.attach(args.buf, c.id, cfg.rest_ms)
      end
    end,
  })
  set_keymaps(cfg.keymaps, impl)
  next_edit.set_keymaps(cfg.next_edit.keymaps)
  vim.api.nvim_create_user_command('Draftline', function(a)
    local run = subcommands[a.args]
    if not run then
      vim.notify('Draftline: unknown subcommand ' .. a.args .. ' (stats, toggle, status)', vim.log.levels.ERROR)
      return
    end
    run()
  end, { nargs = 1, complete = function() return vim.tbl_keys(subcommands) end, desc = 'Draftline: stats | toggle | status' })
end

return M
