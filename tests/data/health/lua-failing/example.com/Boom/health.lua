-- Raises an error quoting the object: fails at line 2.
error("boom: " .. tostring(obj.metadata.name))
