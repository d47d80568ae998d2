-- Tries to run a command: os.execute is not in the sandbox, so this fails at line 2.
os.execute("touch /tmp/driftless-lua-escaped")
return { status = "Healthy" }
