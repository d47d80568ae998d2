-- Allocates without end: stopped by the memory limit. Each string has its own length, so each
-- is a new 1 MiB string: Lua 5.1 interns strings, and the same string made again takes no memory.
local t = {}
while true do t[#t + 1] = string.rep("x", 1024 * 1024 + #t) end
