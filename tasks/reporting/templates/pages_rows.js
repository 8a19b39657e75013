function pc(x){return (x*100).toFixed(1)+'%';}
function fig(p){var boxes=p[4].map(function(b){return '<div class="bx" style="left:'+pc(b[2])+';top:'+pc(b[3])+
';width:'+pc(b[4]-b[2])+';height:'+pc(b[5]-b[3])+'" title="'+h(b[0])+' = '+h(b[1])+'"><span>'+h(b[0])+
'</span></div>';}).join('');
var named=p[4].map(function(b){return b[0];}).filter(function(n,i,a){return a.indexOf(n)===i;}).sort();
var ratio=p[2]?'aspect-ratio:'+p[2]+'/'+p[3]:'height:200px';
var img=p[1]?'<img src="'+h(p[1])+'" loading="lazy" alt="page '+p[0]+'">':'<div class="noimg">page image not '+
'rendered (over the report&#x27;s page budget, or the file could not be read again)</div>';
var cap='p. '+p[0]+(named.length?' · boxed: '+h(named.join(', ')):'')+
(p[5].length?' · cited by the model, no text layer (no box): '+h(p[5].join(', ')):'');
return '<figure class="pg"><div class="pgi" style="'+ratio+'">'+img+boxes+'</div><figcaption>'+cap+
'</figcaption></figure>';}
function snip(s){return '<p><b>'+h(s[0])+'</b> <span class="small muted">'+h(s[1])+'</span><br>'+h(s[3])+
'<mark title="'+h(s[0])+' = '+h(s[2])+'">'+h(s[4])+'</mark>'+h(s[5])+'</p>';}
(window.DOCMILL_ROWS=window.DOCMILL_ROWS||{}).pages=function(d){
return '<tr><td><code>'+h(d[0])+'</code><br><span class="small muted">'+h(d[1])+'</span></td><td><div class="pgs">'+
d[2].map(fig).join('')+(d[3].length?'<div class="snips">'+d[3].map(snip).join('')+'</div>':'')+'</div></td></tr>';};
})();
