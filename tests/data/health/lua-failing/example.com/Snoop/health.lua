-- Tries to read a file: io is not in the sandbox, so this fails at line 2.
local f = io.open("/etc/passwd")
return { status = "Healthy", message = f:read("*a") }
