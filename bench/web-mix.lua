-- wrk script for bench/web.sh: requests rotate over the paths in $MIX (default apps/Web's /lock,
-- /json, /cpu and /throw).
local paths = {}
for p in string.gmatch(os.getenv("MIX") or "/lock /json?n=50 /cpu?n=2000 /throw", "%S+") do
    paths[#paths + 1] = p
end
local i = 0
request = function()
    i = i % #paths + 1
    return wrk.format("GET", paths[i])
end
