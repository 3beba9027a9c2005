-- A per-buffer pause: a function that (re)starts a timer running `fn` once `delay_ms` pass without
-- another call, as next-edit requests and cursor-rest notices wait for. The timer is closed
-- when the buffer goes.
local M = {}

--- The restarting function for `bufnr`; `on_detach`, if given, also runs when the buffer goes.
function M.per_buffer(bufnr, delay_ms, fn, on_detach)
  local timer = vim.uv.new_timer()
  vim.api.nvim_buf_attach(bufnr, false, {
    on_detach = function()
      timer:close()
      if on_detach then
        on_detach()
      end
    end,
  })
  return function()
    timer:stop()
    timer:start(delay_ms, 0, vim.schedule_wrap(fn))
  end
end

return M
