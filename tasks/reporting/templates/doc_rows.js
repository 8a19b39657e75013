function val(v,tag){return v!==null?h(v):'<'+tag+(tag==='span'?' class="muted"':'')+'>null</'+tag+'>';}
function cell(c){var f=c[0],o='';if(f){if(f[4])o+='<span class="ev" title="evidence: '+h(f[4])+' ('+
h(f[5]||'offsets unknown')+')">';o+=val(f[1],'span');
if(f[2])o+=' <span class="was" title="the model&#39;s value">'+h(f[3])+'</span>';if(f[4])o+='</span>';}
else if(c[1]!==null)o+=c[1]+' item(s)';return '<td>'+o+'</td>';}
function field(f){return '<tr><td>'+h(f[0])+'<td>'+val(f[1],'i')+(f[2]?' <s title="the model&#39;s value">'+
h(f[3])+'</s>':'')+'<td>'+h(f[4])+(f[5]?' <small>@'+h(f[5])+'</small>':'');}
(window.DOCMILL_ROWS=window.DOCMILL_ROWS||{}).docs=function(d){
var o='<tr class="st-'+h(d[0])+'"><td><code>'+h(d[1])+'</code>';
if(d[2])o+=' <a class="small" href="../../'+h(d[2])+'" title="stored result: '+h(d[2])+'">result</a>';
if(d[3])o+=' <a class="small" href="../../'+h(d[3])+'" title="raw API responses: '+h(d[3])+'">responses</a>';
o+='</td><td><span class="badge b-'+h(d[0])+'">'+h(d[0])+'</span>';
var r=d[4];if(r)o+=' <span title="'+h(r[1])+(r[2]?' — '+h(r[2]):'')+'"><span class="badge b-'+h(r[0])+'">'+
h(r[0])+'ed by '+h(r[1])+'</span></span>';
if(d[5])o+="<div class='small muted'>"+h(d[5])+': '+h(d[6])+'</div>';
if(d[7])o+="<div class='small muted'>"+h(d[7])+'</div>';
o+='</td>'+d[8].map(cell).join('')+'<td>';
if(d[9].length||d[10].length){o+='<details><summary>'+(d[9].length+d[10].length)+' field(s)</summary><table>'+
'<tr><th>field<th>value<th>evidence @ page, chars'+d[9].map(field).join('')+d[10].map(function(it){
return '<tr><td>'+h(it[0])+'<td>'+it[1]+' item(s)<td>';}).join('')+'</table></details>';}
return o+'</td></tr>';};
})();
