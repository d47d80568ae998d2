-- Never returns: stopped by the time limit.
while true do end
